// Strangers and broken clients against the TCP store: each is refused or cut off within
// bounds, while a legitimate client keeps doing set/get throughout, and the server
// logs what it refused and why. Then the handshake's messages and the reading of
// requests on their own, without a socket.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <collectives/bootstrap/limited_warnings.hpp>
#include <collectives/bootstrap/tcp_store.hpp>

#include "support.hpp"

namespace boot = collectives::bootstrap;
namespace auth = collectives::auth;
namespace asio = boost::asio;
using collectives::errc;
using namespace test_support;

namespace {

const auth::job_token token("the-real-token");
constexpr auto handshake_limit = 300ms;

// A server with a short handshake limit, and a legitimate client hammering it from its
// own thread until the fixture ends; then every one of its calls must have succeeded.
struct guarded_server {
  boot::tcp_store_server server{{asio::ip::make_address("127.0.0.1"), 0}, token, handshake_limit};
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  std::string failure;
  std::thread legit{[this] {
    try {
      boot::tcp_store client("127.0.0.1", server.port(), token, clock::now() + 5s);
      for (int i = 0; !stop; ++i) {
        const std::string value = "value " + std::to_string(i);
        client.set("legit/" + std::to_string(i % 16), value);
        if (client.get("legit/" + std::to_string(i % 16), clock::now() + 2s) != value)
          throw std::runtime_error("wrong value");
        ++rounds;
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }};

  // Ends the legitimate client; it must have kept working from start to end.
  void check_legit_client() {
    const int before = rounds;
    std::this_thread::sleep_for(50ms);
    stop = true;
    legit.join();
    CHECK(failure == "");
    CHECK(rounds > before);  // still making progress after every attack
  }
  ~guarded_server() {
    stop = true;
    if (legit.joinable()) legit.join();
  }
};

// A raw connection to the store, to misbehave on.
struct attacker {
  asio::io_context io;
  std::shared_ptr<tcp::socket> socket = std::make_shared<tcp::socket>(io);

  explicit attacker(std::uint16_t port) { socket->connect({asio::ip::make_address("127.0.0.1"), port}); }

  void send(const std::string& bytes) { asio::write(*socket, asio::buffer(bytes)); }

  // Passes the handshake with the real token: an insider who then breaks the protocol.
  void authenticate() {
    std::optional<auth::outcome> result;
    auth::async_introduce(socket, token, auth::purpose::store, 0, [&](auth::outcome o) { result = std::move(o); });
    io.restart();
    io.run_for(5s);
    REQUIRE(result.has_value());
    REQUIRE(result->accepted);
  }

  // How long until the server closes this connection (reading and discarding whatever
  // it sends first), or nothing if it is still open after `limit`.
  std::optional<std::chrono::milliseconds> closed_within(std::chrono::milliseconds limit) {
    const auto start = clock::now();
    bool closed = false;
    std::array<char, 256> sink{};
    std::function<void()> read_on = [&] {
      socket->async_read_some(asio::buffer(sink), [&](auto ec, std::size_t) {
        if (ec)
          closed = true;
        else
          read_on();
      });
    };
    read_on();
    io.restart();
    io.run_for(limit);
    const auto took = since(start);
    boost::system::error_code ignored;
    socket->close(ignored);  // completes a read still waiting, so nothing outlives this frame
    io.restart();
    io.run();
    if (!closed) return std::nullopt;
    return took;
  }
};

std::string request(boot::detail::store_op op, std::uint32_t key_size, std::uint32_t value_size,
                    std::uint32_t timeout_ms = 0) {
  const auto raw = boot::detail::encode_request({op, key_size, value_size, timeout_ms});
  return std::string(raw.begin(), raw.end());
}

}  // namespace

TEST_CASE("strangers are refused during the handshake and the legitimate client never notices") {
  stderr_capture capture;
  {
    guarded_server guarded;
    const auto port = guarded.server.port();

    // A client with the wrong token learns it was refused, promptly.
    auto start = clock::now();
    try {
      boot::tcp_store("127.0.0.1", port, auth::job_token("a-wrong-token"), clock::now() + 2s);
      FAIL("a wrong token was admitted");
    } catch (const collectives::error& e) {
      CHECK(e.code() == errc::unauthorized);
      CHECK(std::string(e.what()).find("did not admit") != std::string::npos);
    }
    CHECK(since(start) < 1s);

    {  // garbage instead of a response: cut off as soon as it is read
      attacker garbage(port);
      garbage.send(std::string(80, '\xAB'));
      const auto closed = garbage.closed_within(2s);
      REQUIRE(closed.has_value());
      CHECK(*closed < handshake_limit);
    }
    {  // half a response, then hanging up
      attacker quitter(port);
      quitter.send(std::string(20, '\x01'));
    }
    {  // half a response, then silence: the handshake timer ends it
      attacker staller(port);
      staller.send(std::string(20, '\x01'));
      const auto closed = staller.closed_within(3s);
      REQUIRE(closed.has_value());
      CHECK(*closed >= handshake_limit - 50ms);
      CHECK(*closed < handshake_limit + 1s);
    }
    {  // a connection that never says anything
      attacker mute(port);
      const auto closed = mute.closed_within(3s);
      REQUIRE(closed.has_value());
      CHECK(*closed >= handshake_limit - 50ms);
      CHECK(*closed < handshake_limit + 1s);
    }
    for (int i = 0; i < 50; ++i) attacker scan(port);  // a port scan: connect, close

    {  // a hundred silent connections at once are all cut off by their timers
      std::vector<std::unique_ptr<attacker>> crowd;
      for (int i = 0; i < 100; ++i) crowd.push_back(std::make_unique<attacker>(port));
      start = clock::now();
      for (auto& a : crowd) REQUIRE(a->closed_within(3s).has_value());
      CHECK(since(start) < handshake_limit + 2s);
    }
    guarded.check_legit_client();
  }
  const auto log = capture.finish();
  CHECK(log.find("refused a connection from 127.0.0.1:") != std::string::npos);
  CHECK(log.find("wrong job token") != std::string::npos);
  CHECK(log.find("bad preamble") != std::string::npos);
  CHECK(log.find("no complete handshake within 300 ms") != std::string::npos);
  // 155 refusals within seconds: five lines, then one that counts the rest.
  std::size_t lines = 0;
  for (auto at = log.find("refused a connection from"); at != std::string::npos; at = log.find("refused a connection from", at + 1))
    ++lines;
  CHECK(lines == 5);
  CHECK(log.find(": refused connections: 150 more not shown (at most 5 lines per 10 s)") != std::string::npos);
}

TEST_CASE("limited warnings: a burst per window, then one line that counts what was left out") {
  stderr_capture capture;
  {
    boot::limited_warnings limited("knocks", 3, 300ms);
    for (int i = 0; i < 10; ++i) limited.warn("knock " + std::to_string(i));
    std::this_thread::sleep_for(350ms);
    limited.warn("knock after the window");
    for (int i = 0; i < 4; ++i) limited.warn("knock again " + std::to_string(i));
  }  // the last window's summary comes when the limiter ends
  const auto log = capture.finish();
  CHECK(log ==
        "collectives WARN: knock 0\n"
        "collectives WARN: knock 1\n"
        "collectives WARN: knock 2\n"
        "collectives WARN: knocks: 7 more not shown (at most 3 lines per 300 ms)\n"
        "collectives WARN: knock after the window\n"
        "collectives WARN: knock again 0\n"
        "collectives WARN: knock again 1\n"
        "collectives WARN: knocks: 2 more not shown (at most 3 lines per 300 ms)\n");
}

TEST_CASE("an admitted client that breaks the protocol is cut off without harm to others") {
  using boot::detail::store_op;
  stderr_capture capture;
  {
    guarded_server guarded;
    const auto port = guarded.server.port();
    struct misdeed {
      const char* what;
      std::string bytes;
    };
    const std::vector<misdeed> misdeeds = {
        {"a value length of 4 GiB - 1", request(store_op::set, 1, 0xFFFFFFFFu)},
        {"a value length just over the limit", request(store_op::set, 1, boot::max_value_size + 1)},
        {"a key length over the limit", request(store_op::get, boot::max_key_size + 1, 0, 100)},
        {"an unknown operation", std::string(1, '\x7F') + request(store_op::set, 0, 0).substr(1)},
        {"reserved bytes set", request(store_op::set, 0, 0).replace(2, 1, 1, '\x01')},
        {"a get that carries a value", request(store_op::get, 1, 5, 100)},
        {"an add with a 4-byte delta", request(store_op::add, 1, 4)},
        {"a set with a timeout", request(store_op::set, 1, 1, 100)},
    };
    for (const auto& m : misdeeds) {
      CAPTURE(m.what);
      attacker insider(port);
      insider.authenticate();
      insider.send(m.bytes);
      const auto closed = insider.closed_within(2s);
      REQUIRE(closed.has_value());
      CHECK(*closed < 1s);
    }
    {  // speaking again while a get is parked is a protocol breach too
      attacker impatient(port);
      impatient.authenticate();
      impatient.send(request(store_op::get, 5, 0, 5000) + "nokey" + request(store_op::check, 1, 0) + "x");
      const auto closed = impatient.closed_within(2s);
      REQUIRE(closed.has_value());
      CHECK(*closed < 1s);
    }
    {  // hanging up while parked: forgotten at once (the server keeps serving that key)
      attacker leaver(port);
      leaver.authenticate();
      leaver.send(request(store_op::get, 4, 0, 60000) + "gone");
    }
    std::this_thread::sleep_for(100ms);
    boot::tcp_store("127.0.0.1", port, token, clock::now() + 2s).set("gone", "set after its waiter left");
    guarded.check_legit_client();
  }
  const auto log = capture.finish();
  CHECK(log.find("closed the connection from 127.0.0.1:") != std::string::npos);
  CHECK(log.find("a value of 4294967295 bytes is larger than the limit") != std::string::npos);
  CHECK(log.find("unknown operation 127") != std::string::npos);
  CHECK(log.find("sent a request before the answer to its previous one") != std::string::npos);
}

TEST_CASE("a handshake response is accepted only as made: with this token, purpose and challenge") {
  namespace hs = auth::detail;
  hs::nonce server{}, client{};
  for (std::size_t i = 0; i < server.size(); ++i) server[i] = static_cast<unsigned char>(i), client[i] = 0xA0;
  const auto challenge = hs::make_challenge(auth::purpose::store, server);
  CHECK(hs::read_challenge(challenge, auth::purpose::store) == server);
  CHECK_FALSE(hs::read_challenge(challenge, auth::purpose::peer));
  const auto response = hs::make_response(token, auth::purpose::store, 42, server, client);
  const auto ok = hs::check_response(response, token, auth::purpose::store, server);
  CHECK((ok.accepted && ok.hello == 42 && ok.client == client));
  for (std::size_t at = 0; at < response.size(); ++at) {
    auto bent = response;
    bent[at] ^= 1;
    CAPTURE(at);
    const auto refused = hs::check_response(bent, token, auth::purpose::store, server);
    CHECK_FALSE(refused.accepted);
    CHECK(refused.why == (at < 8 ? "not a collectives handshake (bad preamble)" : "wrong job token"));
  }
  CHECK_FALSE(hs::check_response(response, auth::job_token("the-real-tokem"), auth::purpose::store, server).accepted);
  // HMAC pads short keys with zeros: a token with a NUL would prove the same as one without.
  CHECK_THROWS_AS(auth::job_token(std::string("the-real-token\0", 15)), collectives::error);
  CHECK_FALSE(hs::check_response(response, token, auth::purpose::peer, server).accepted);
  const auto confirmation = hs::make_confirmation(token, auth::purpose::store, 42, server, client);
  CHECK(hs::check_confirmation(confirmation, token, auth::purpose::store, 42, server, client));
  CHECK_FALSE(hs::check_confirmation(confirmation, token, auth::purpose::store, 43, server, client));
}

TEST_CASE("store requests read from a byte stream: the limits are checked before the body is awaited") {
  using boot::detail::store_op;
  using taken = boot::detail::taken_request::result;
  const auto bytes = [](const std::string& s) {
    return std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  };
  const std::string set = request(store_op::set, 3, 5, 0) + "keyvalue";
  const auto whole = boot::detail::take_request(bytes(set + request(store_op::check, 3, 0, 0)));
  REQUIRE(whole.status == taken::complete);
  CHECK((whole.used == set.size() && whole.request.key == "key" && whole.request.value == "value"));
  CHECK(boot::detail::take_request(bytes(set.substr(0, 20))).status == taken::incomplete);
  // A header naming a value beyond the limit is refused with no body at all.
  const auto too_large = request(store_op::set, 1, std::uint32_t(boot::max_value_size) + 1, 0);
  const auto huge = boot::detail::take_request(bytes(too_large));
  CHECK((huge.status == taken::refused && huge.why.find("larger than the limit") != std::string::npos));

  boot::detail::store_data data;
  const auto& r = whole.request;
  CHECK(boot::detail::answer_request(data, r.header, r.key, r.value).changed);
  const auto got = boot::detail::answer_request(data, {store_op::get, 3, 0, 0}, "key", "");
  CHECK((got.status == boot::detail::store_status::ok && got.value == "value"));
  CHECK(boot::detail::answer_request(data, {store_op::get, 4, 0, 100}, "nope", "").parks);
  CHECK(boot::detail::answer_request(data, {store_op::add, 3, 8, 0}, "key", std::string(8, '\1')).status ==
        boot::detail::store_status::not_integer);
}
