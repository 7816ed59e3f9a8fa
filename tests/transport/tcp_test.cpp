// The TCP transport with ranks as threads of this process, over real loopback
// sockets: message matching in every order, sizes that don't fit, fused receives,
// abort, a peer that leaves, and strangers at the door during start-up.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <cstring>
#include <numeric>
#include <thread>

#include <collectives/collectives.hpp>
#include <collectives/bootstrap/file_store.hpp>
#include <collectives/transport/tcp.hpp>
// The parts the cases below reach into (tcp.hpp itself names no Asio type).
#include <collectives/bootstrap/auth.hpp>
#include <collectives/transport/tcp/address.hpp>
#include <collectives/transport/tcp/engine.hpp>
#include <collectives/transport/tcp/frame.hpp>
#include <doctest/doctest.h>

#include "memory_store.hpp"

namespace coll = collectives;
using namespace std::chrono_literals;

namespace {

const coll::auth::job_token token("tcp-test-token");

coll::tcp_options loopback() {
  coll::tcp_options o;
  o.interface = "127.0.0.1";
  o.startup_timeout = 20s;
  return o;
}

// Runs fn(communicator&) for ranks 0..size-1 on threads, each with its own TCP
// transport; rethrows the first failure.
template <class Fn>
void run_tcp_ranks(int size, Fn fn, coll::tcp_options options = loopback(), std::chrono::milliseconds timeout = 20s) {
  testing::memory_store store;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          coll::communicator<coll::tcp> comm(coll::tcp(r, size, store, token, options), timeout);
          fn(comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::span<const std::byte> out_bytes(const std::vector<int>& v) { return std::as_bytes(std::span{v}); }
std::span<std::byte> in_bytes(std::vector<int>& v) { return std::as_writable_bytes(std::span{v}); }

// Completes every request or fails at the deadline.
void wait_all(coll::tcp& t, std::vector<coll::tcp::request> pending, std::chrono::milliseconds limit = 10s) {
  const auto until = coll::clock::now() + limit;
  while (!pending.empty()) {
    std::erase_if(pending, [&](auto& r) { return t.test(r); });
    if (!pending.empty() && !t.wait_for_activity(until) && coll::clock::now() >= until)
      throw coll::error(coll::errc::timeout, "wait_all timed out");
  }
}

}  // namespace

TEST_CASE("messages match by tag whether the receive is posted before or after they arrive") {
  run_tcp_ranks(2, [](auto& comm) {
    auto& t = comm.transport();
    const int peer = 1 - t.rank();
    // Small (kept on arrival), large (held in the socket), and empty messages.
    const std::vector<std::size_t> sizes{1, 1000, 300'000, 0, 5};
    std::vector<std::vector<int>> out, in;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      out.emplace_back(sizes[i]);
      std::iota(out.back().begin(), out.back().end(), int(i * 1000 + std::size_t(t.rank())));
      in.emplace_back(sizes[i], -1);
    }
    std::vector<coll::tcp::request> pending;
    for (std::size_t i = 0; i < sizes.size(); ++i) pending.push_back(t.post_send(peer, {1, std::uint32_t(i)}, out_bytes(out[i])));
    if (t.rank() == 0) std::this_thread::sleep_for(50ms);  // rank 1's messages arrive before rank 0 posts
    for (std::size_t i = sizes.size(); i-- > 0;) pending.push_back(t.post_recv(peer, {1, std::uint32_t(i)}, in_bytes(in[i])));
    wait_all(t, std::move(pending));
    for (std::size_t i = 0; i < sizes.size(); ++i)
      for (std::size_t k = 0; k < sizes[i]; ++k) REQUIRE(in[i][k] == int(i * 1000 + std::size_t(peer) + k));
  });
}

TEST_CASE("a message larger than the receive fails that receive only; the connection goes on") {
  run_tcp_ranks(2, [](auto& comm) {
    auto& t = comm.transport();
    std::vector<int> big(100'000, 7), small(10), after(3, 9), got(3);
    if (t.rank() == 0) {
      wait_all(t, {t.post_send(1, {1, 0}, out_bytes(big)), t.post_send(1, {1, 1}, out_bytes(after))});
    } else {
      auto r = t.post_recv(0, {1, 0}, in_bytes(small));
      try {
        wait_all(t, {r});
        FAIL("an oversized message was accepted");
      } catch (const coll::error& e) {
        CHECK(e.code() == coll::errc::message_truncated);
        CHECK(std::string(e.what()).find("400000 bytes where 40 were expected") != std::string::npos);
        t.cancel(r);
      }
      wait_all(t, {t.post_recv(0, {1, 1}, in_bytes(got))});
      CHECK(got == after);
      CHECK(small == std::vector<int>(10, 0));  // nothing written past or into it
    }
  });
}

TEST_CASE("collectives over tcp match a serial reference, fused reduction included") {
  for (int p : {1, 2, 3, 4}) {
    CAPTURE(p);
    run_tcp_ranks(p, [p](auto& comm) {
      for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(p) + 1, std::size_t(1) << 20 | 3}) {
        std::vector<double> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = double((i * 7 + std::size_t(comm.rank())) % 11);
        auto ring = v, tree = v, direct = v;
        coll::all_reduce<coll::ring>(comm, std::span{ring}, coll::sum{});
        coll::all_reduce<coll::double_binary_tree>(comm, std::span{tree}, coll::sum{});
        coll::all_reduce<coll::direct>(comm, std::span{direct}, coll::sum{});
        std::vector<double> expect(n, 0.0);
        for (std::size_t i = 0; i < n; ++i)
          for (int r = 0; r < p; ++r) expect[i] += double((i * 7 + std::size_t(r)) % 11);
        CHECK(ring == expect);
        CHECK(tree == expect);
        CHECK(direct == expect);
      }
    });
  }
}

TEST_CASE("abort from another thread wakes every rank of the group") {
  std::atomic<int> aborted{0};
  run_tcp_ranks(3, [&](auto& comm) {
    std::jthread watchdog;
    if (comm.rank() == 1) watchdog = std::jthread([&] { std::this_thread::sleep_for(200ms); comm.abort(); });
    std::vector<int> never(4);
    try {
      // Nobody sends this, so only the abort can end the wait.
      coll::recv(comm, std::span{never}, (comm.rank() + 1) % 3);
    } catch (const coll::error& e) {
      if (e.code() == coll::errc::aborted) ++aborted;
    }
  }, loopback(), 10s);
  CHECK(aborted == 3);
}

TEST_CASE("a rank that closes its communicator is named by a peer still waiting for it") {
  run_tcp_ranks(2, [](auto& comm) {
    if (comm.rank() == 1) return;  // leaves at once: its transport says goodbye
    std::vector<int> never(4);
    try {
      coll::recv(comm, std::span{never}, 1);
      FAIL("received from a rank that left");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::peer_lost);
      CHECK(std::string(e.what()).find("rank 1 closed its communicator") != std::string::npos);
    }
  });
}

TEST_CASE("a rank that leaves with a peer's large message unread still delivers its last message whole") {
  // Rank 0 leaves right after posting 2 MiB to rank 1, which reads nothing for a while
  // and has sent rank 0 a large message it never receives (it stays in rank 0's socket).
  // Closing a socket with unread bytes resets the connection and drops what the kernel
  // had not sent yet: rank 1 would lose the end of the message and blame rank 0.
  testing::memory_store store;
  std::vector<int> sent(std::size_t(1) << 19), got(sent.size(), -1);
  std::iota(sent.begin(), sent.end(), 3);
  std::exception_ptr failure;
  std::jthread leaver([&] {
    try {
      coll::tcp t(0, 2, store, token, loopback());
      [[maybe_unused]] auto last = t.post_send(1, {1, 2}, out_bytes(sent));
    } catch (...) {
      failure = std::current_exception();
    }
  });
  coll::tcp t(1, 2, store, token, loopback());
  const std::vector<int> unread(std::size_t(1) << 20, 7);
  auto never_received = t.post_send(0, {1, 1}, out_bytes(unread));
  std::this_thread::sleep_for(300ms);
  wait_all(t, {t.post_recv(0, {1, 2}, in_bytes(got))});
  t.cancel(never_received);
  leaver.join();
  if (failure) std::rethrow_exception(failure);
  CHECK(got == sent);
}

TEST_CASE("a peer process that dies behind a large early message it sent is reported lost") {
  // The message is larger than the early limit, so it stays in the socket (held) until
  // its receive is posted, and the end of file behind it is not read; the receive that
  // is waiting is another one. The peer is a forked process, killed without a goodbye.
  const auto dir = std::filesystem::temp_directory_path() / ("collectives-tcp-held-" + std::to_string(::getpid()));
  int joined[2];  // the child sends, then dies, once this rank has joined
  REQUIRE(::pipe(joined) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(joined[1]);
    try {
      coll::bootstrap::file_store store(dir);
      coll::tcp t(1, 2, store, token, loopback());
      char byte = 0;
      [[maybe_unused]] const auto n = ::read(joined[0], &byte, 1);
      const std::vector<int> early(70'000 / sizeof(int), 5);  // over the 64 KiB early limit
      auto r = t.post_send(0, {1, 2}, out_bytes(early));
      const auto until = coll::clock::now() + 200ms;
      while (!t.test(r) && coll::clock::now() < until) t.wait_for_activity(until);
      ::kill(::getpid(), SIGKILL);  // no goodbye
    } catch (...) {
    }
    ::_exit(3);
  }
  REQUIRE(child > 0);
  ::close(joined[0]);
  std::error_code got;
  std::chrono::nanoseconds took{};
  {
    coll::bootstrap::file_store store(dir);
    coll::tcp t(0, 2, store, token, loopback());
    ::close(joined[1]);
    std::vector<int> never(4);
    auto r = t.post_recv(1, {1, 1}, in_bytes(never));
    const auto started = coll::clock::now();
    try {
      wait_all(t, {r}, 5s);
    } catch (const coll::error& e) {
      got = e.code();
      took = coll::clock::now() - started;
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  CHECK(WIFSIGNALED(status));
  CHECK(got == coll::errc::peer_lost);
  CHECK(took < 3s);
}

TEST_CASE("a receive nobody answers times out at the communicator's deadline") {
  run_tcp_ranks(2, [](auto& comm) {
    comm.set_timeout(300ms);
    if (comm.rank() == 1) return std::this_thread::sleep_for(1500ms);  // present, but silent
    std::vector<int> v(4);
    const auto start = coll::clock::now();
    try {
      coll::recv(comm, std::span{v}, 1);
      FAIL("received what nobody sent");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::timeout);
    }
    const auto took = coll::clock::now() - start;
    CHECK(took >= 300ms);
    CHECK(took < 1s);
  });
}

// ---- strangers at the door -------------------------------------------------------

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

tcp::endpoint published_address(testing::memory_store& store, int rank) {
  const auto text = store.get("collectives/tcp/1/address/" + std::to_string(rank), coll::clock::now() + 10s);
  const auto colon = text.rfind(':');
  return {asio::ip::make_address(text.substr(0, colon)), static_cast<unsigned short>(std::stoi(text.substr(colon + 1)))};
}

// Sends `bytes` (maybe nothing) and reports whether the server then closed the
// connection within `limit`.
bool closed_after(const tcp::endpoint& at, const std::vector<unsigned char>& bytes, std::chrono::milliseconds limit) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect(at);
  if (!bytes.empty()) asio::write(s, asio::buffer(bytes));
  std::array<unsigned char, 256> sink{};
  bool closed = false;
  std::function<void()> read_more = [&] {
    s.async_read_some(asio::buffer(sink), [&](auto ec, std::size_t) {
      if (ec) closed = true;
      else read_more();  // the challenge; keep reading until the server hangs up
    });
  };
  read_more();
  io.run_for(limit);
  return closed;
}

// Runs the client side of the handshake with `token`, vouching for `hello`; true if
// the server admitted the connection and still kept it open a little later.
bool admitted(const tcp::endpoint& at, const coll::auth::job_token& t, std::uint64_t hello) {
  asio::io_context io;
  auto s = std::make_shared<tcp::socket>(io);
  s->connect(at);
  coll::auth::outcome result;
  coll::auth::async_introduce(s, t, coll::auth::purpose::peer, hello, [&](coll::auth::outcome o) { result = o; }, 5s);
  io.run();
  if (!result.accepted) return false;
  bool closed = false;
  std::array<unsigned char, 64> sink{};
  s->async_read_some(asio::buffer(sink), [&](auto ec, std::size_t) { closed = bool(ec); });
  io.restart();
  io.run_for(1s);
  return !closed;
}

std::uint64_t hello(int rank, int size) { return std::uint64_t(rank) | std::uint64_t(size) << 32; }

}  // namespace

TEST_CASE("strangers at a rank's door during start-up are refused and the group still forms") {
  testing::memory_store store;
  auto options = loopback();
  options.handshake_limit = 500ms;
  std::exception_ptr failure;
  std::vector<int> result;
  std::jthread rank0([&] {
    try {
      coll::communicator<coll::tcp> comm(coll::tcp(0, 2, store, token, options), 10s);
      result = {1, 2, 3};
      coll::all_reduce(comm, std::span{result}, coll::sum{});
    } catch (...) {
      failure = std::current_exception();
    }
  });
  const auto door = published_address(store, 0);
  std::vector<unsigned char> garbage(80);
  for (std::size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<unsigned char>(i * 37 + 11);

  CHECK_FALSE(admitted(door, coll::auth::job_token("not the job's token"), hello(1, 2)));
  CHECK(closed_after(door, garbage, 3s));                                  // garbage instead of a response
  CHECK(closed_after(door, std::vector<unsigned char>(30, 0), 3s));        // a truncated response, then silence
  CHECK(closed_after(door, {}, 3s));                                       // a connection that never speaks
  { asio::io_context io; tcp::socket s(io); s.connect(door); }             // a port scan: connect and leave
  CHECK_FALSE(admitted(door, token, hello(1, 3)));              // the right token, another group's size
  CHECK_FALSE(admitted(door, token, hello(0, 2)));              // a rank that doesn't connect to rank 0

  std::jthread rank1([&] {
    coll::communicator<coll::tcp> comm(coll::tcp(1, 2, store, token, options), 10s);
    std::vector<int> mine{10, 20, 30};
    coll::all_reduce(comm, std::span{mine}, coll::sum{});
    CHECK(mine == std::vector<int>{11, 22, 33});
  });
  rank1.join();
  rank0.join();
  if (failure) std::rethrow_exception(failure);
  CHECK(result == std::vector<int>{11, 22, 33});
}

// Rank 0 is real; "rank 1" knows the token and passes the handshake, then sends
// `frames` after the start-up's meeting message. Returns what rank 0's receive of
// 16 bytes threw.
std::string what_rank0_saw(const std::vector<coll::tcp_detail::header_bytes>& frames) {
  testing::memory_store store;
  std::string seen = "nothing";
  std::jthread rank0([&] {
    try {
      coll::tcp t(0, 2, store, token, loopback());
      std::vector<int> small(4);
      auto r = t.post_recv(1, {1, 0}, in_bytes(small));
      try {
        wait_all(t, {r}, 5s);
      } catch (const coll::error& e) {
        seen = coll::make_error_code(coll::errc(e.code().value())).message() + ": " + e.what();
        t.cancel(r);
      }
    } catch (const std::exception& e) {
      seen = std::string("start-up failed: ") + e.what();
    }
  });
  const auto door = published_address(store, 0);
  store.set("collectives/tcp/1/address/1", "127.0.0.1:1");  // nobody connects to "rank 1"
  asio::io_context io;
  auto s = std::make_shared<tcp::socket>(io);
  s->connect(door);
  bool admitted = false;
  coll::auth::async_introduce(s, token, coll::auth::purpose::peer, hello(1, 2), [&](auto o) { admitted = o.accepted; }, 5s);
  io.run();
  REQUIRE(admitted);
  asio::write(*s, asio::buffer(coll::tcp_detail::encode({coll::tcp_detail::frame_kind::data, {coll::reserved_call::tcp_hello, 0}, 0})));
  for (const auto& f : frames) asio::write(*s, asio::buffer(f));
  rank0.join();  // rank 0 must be done without this peer closing or sending more
  return seen;
}

TEST_CASE("an admitted peer's frame is never trusted beyond what the receiver posted") {
  using namespace coll::tcp_detail;
  // A terabyte announced for a 16-byte receive: refused at once, nothing allocated.
  const auto huge = what_rank0_saw({encode({frame_kind::data, {1, 0}, std::uint64_t(1) << 40})});
  CHECK(huge.find("message truncated") == 0);
  CHECK(huge.find("1099511627776 bytes where 16 were expected") != std::string::npos);
  // A header that is not one of ours: the link is dropped and the peer named.
  header_bytes garbage{};
  garbage.fill(0xAB);
  const auto bad = what_rank0_saw({garbage});
  CHECK(bad.find("peer lost") == 0);
  CHECK(bad.find("rank 1 sent a malformed frame header") != std::string::npos);
}

// ---- joining with explicit arguments ---------------------------------------------

namespace {

unsigned short free_port() {
  asio::io_context io;
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// Each rank joins with `make(rank)` and sums its rank over the group.
template <class Make>
void ranks_sum_their_ranks(int size, Make make) {
  std::vector<int> sums(static_cast<std::size_t>(size), -1);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          coll::communicator<coll::tcp> comm(make(r), 10s);
          sums[std::size_t(r)] = coll::all_reduce(comm, comm.rank(), coll::sum{});
        } catch (...) {
          errors[std::size_t(r)] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  CHECK(sums == std::vector<int>(static_cast<std::size_t>(size), size * (size - 1) / 2));
}

}  // namespace

TEST_CASE("ranks join through the TCP store served by rank 0, given rank, size and address in code") {
  const auto port = free_port();
  ranks_sum_their_ranks(3, [&](int r) {
    coll::bootstrap::launch_info job{.rank = r, .size = 3, .master_addr = "127.0.0.1", .master_port = port, .origin = "arguments", .launcher_store_prefix = {}, .job_on_this_host = {}, .derived_port_of_job = {}};
    return coll::tcp::join(job, token, loopback());
  });
}

TEST_CASE("ranks join over IPv6 loopback") {
  const auto port = free_port();
  auto options = loopback();
  options.interface = "::1";
  ranks_sum_their_ranks(2, [&](int r) {
    coll::bootstrap::launch_info job{.rank = r, .size = 2, .master_addr = "[::1]", .master_port = port, .origin = "arguments", .launcher_store_prefix = {}, .job_on_this_host = {}, .derived_port_of_job = {}};
    return coll::tcp::join(job, token, options);
  });
}

TEST_CASE("ranks join through a file store in a shared directory") {
  const auto dir = std::filesystem::temp_directory_path() / ("collectives-tcp-test-" + std::to_string(::getpid()));
  ranks_sum_their_ranks(3, [&](int r) {
    coll::bootstrap::file_store store(dir);
    return coll::tcp(r, 3, store, token, loopback());
  });
  std::filesystem::remove_all(dir);
}

TEST_CASE("a receive posted while its small message is still arriving gets it") {
  testing::memory_store store;
  std::atomic<bool> half_sent{false};
  std::vector<int> got(250, -1), want(250);
  std::iota(want.begin(), want.end(), 7);
  std::exception_ptr failure;
  std::jthread rank0([&] {
    try {
      coll::tcp t(0, 2, store, token, loopback());
      while (!half_sent) std::this_thread::sleep_for(1ms);
      // Let the transport read the header and start reading the early message...
      const auto until = coll::clock::now() + 100ms;
      while (coll::clock::now() < until) t.wait_for_activity(until);
      // ...then post its receive while the rest is still on its way.
      wait_all(t, {t.post_recv(1, {1, 0}, in_bytes(got))}, 5s);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  const auto door = published_address(store, 0);
  store.set("collectives/tcp/1/address/1", "127.0.0.1:1");  // nobody connects to "rank 1"
  asio::io_context io;
  auto s = std::make_shared<tcp::socket>(io);
  s->connect(door);
  coll::auth::async_introduce(s, token, coll::auth::purpose::peer, hello(1, 2), [](auto) {}, 5s);
  io.run();
  using namespace coll::tcp_detail;
  const auto payload = std::as_bytes(std::span{want});
  asio::write(*s, asio::buffer(encode({frame_kind::data, {coll::reserved_call::tcp_hello, 0}, 0})));
  asio::write(*s, asio::buffer(encode({frame_kind::data, {1, 0}, payload.size()})));
  asio::write(*s, asio::buffer(payload.data(), 400));
  half_sent = true;
  std::this_thread::sleep_for(300ms);
  asio::write(*s, asio::buffer(payload.data() + 400, payload.size() - 400));
  rank0.join();
  if (failure) std::rethrow_exception(failure);
  CHECK(got == want);
}

TEST_CASE("the interface is chosen by name, by address, or by the route to the master") {
  using coll::tcp_detail::choose_interface;
  const auto by_name = choose_interface("lo", "");
  CHECK(by_name.name == "lo");
  CHECK(by_name.address == asio::ip::make_address("127.0.0.1"));  // IPv4 first when it has both
  const auto by_address = choose_interface("127.0.0.1", "");
  CHECK(by_address.name == "lo");
  const auto by_route = choose_interface("", "127.0.0.1");
  CHECK(by_route.address.is_loopback());
  try {
    choose_interface("no-such-interface0", "");
    FAIL("an unknown interface was accepted");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    CHECK(std::string(e.what()).find("COLLECTIVES_SOCKET_IFNAME=no-such-interface0") != std::string::npos);
  }
}

TEST_CASE("a published address reads back as written; a bad port is an error that names the text") {
  using coll::tcp_detail::format_endpoint;
  using coll::tcp_detail::parse_endpoint;
  for (const char* text : {"10.0.0.1:4242", "[::1]:1", "127.0.0.1:65535", "[fe80::1%1]:80"})
    CHECK(parse_endpoint(text) == parse_endpoint(format_endpoint(parse_endpoint(text))));
  const coll::tcp_detail::tcp::endpoint v6(asio::ip::make_address("2001:db8::7"), 4242);
  CHECK(parse_endpoint(format_endpoint(v6)) == v6);
  for (const std::string bad : {"127.0.0.1:70000", "127.0.0.1:65536", "127.0.0.1:0", ":abc", "127.0.0.1:abc",
                                "127.0.0.1:", "127.0.0.1:-1", "127.0.0.1:80x", "127.0.0.1", "[::1]", "::1:80",
                                "not-an-ip:80", "[::1]:99999999999999999999"}) {
    CAPTURE(bad);
    try {
      parse_endpoint(bad);
      FAIL("accepted");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::protocol_error);
      CHECK(std::string(e.what()).find("\"" + bad + "\"") != std::string::npos);
    }
  }
}

TEST_CASE("a rank that finds an out-of-range port published for a peer fails start-up with that text") {
  testing::memory_store store;
  store.set("collectives/tcp/1/address/0", "127.0.0.1:70000");  // as if rank 0 published it
  auto options = loopback();
  options.startup_timeout = 5s;
  try {
    coll::tcp(1, 2, store, token, options);
    FAIL("start-up succeeded");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::protocol_error);
    CHECK(std::string(e.what()).find("\"127.0.0.1:70000\"") != std::string::npos);
  }
}

TEST_CASE("COLLECTIVES_DEBUG=INFO names each rank's interface and addresses; the ranks learn their hosts with them") {
  run_tcp_ranks(2, [](auto& comm) {
    const std::string d = comm.transport().describe();
    CHECK(d.find("tcp rank " + std::to_string(comm.rank()) + " of 2 on lo 127.0.0.1:") == 0);
    CHECK(d.find(" 0=127.0.0.1:") != std::string::npos);
    CHECK(d.find(" 1=127.0.0.1:") != std::string::npos);
    CHECK(d.find("host=") == std::string::npos);
    CHECK(coll::hosts_known_to(comm.transport()) == std::vector<int>{0, 0});  // both threads on this host
  });
  // A record names its host after the endpoint; one without (an older writer's) has none.
  using namespace coll::tcp_detail;
  const tcp::endpoint at(asio::ip::make_address("10.0.0.1"), 4242);
  const std::string record = format_record(at, "00ff");
  CHECK(parse_endpoint(endpoint_of_record(record)) == at);
  CHECK(host_of_record(record) == "00ff");
  CHECK(endpoint_of_record("10.0.0.1:4242") == "10.0.0.1:4242");
  CHECK(host_of_record("10.0.0.1:4242").empty());
}

TEST_CASE("tcp_options::from_env reads COLLECTIVES_STARTUP_TIMEOUT by shm's rule, and the interface") {
  ::setenv("COLLECTIVES_STARTUP_TIMEOUT", "2.5", 1);
  ::setenv("COLLECTIVES_SOCKET_IFNAME", "lo", 1);
  CHECK(coll::tcp_options::from_env().startup_timeout == std::chrono::milliseconds{2500});
  CHECK(coll::tcp_options::from_env().interface == "lo");
  for (const char* refused : {"0", "2000000", "soon"}) {
    ::setenv("COLLECTIVES_STARTUP_TIMEOUT", refused, 1);
    std::string by_tcp;
    try {
      (void)coll::tcp_options::from_env();
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::invalid_config);
      by_tcp = e.what();
    }
    CHECK(by_tcp.starts_with(std::string("COLLECTIVES_STARTUP_TIMEOUT=") + refused + " is "));
    CHECK(by_tcp.find("(expected a number of seconds from 0.001 to 1000000)") != std::string::npos);
  }
  ::unsetenv("COLLECTIVES_STARTUP_TIMEOUT");
  ::unsetenv("COLLECTIVES_SOCKET_IFNAME");
}
