// c10d_store against PyTorch's own TCPStore server (torch_store_server.py, run by the
// python3 that with_torch_python.sh found): every store call, keys that torch's own
// client wrote, prefixes, deadlines that name the key, a server that goes away
// mid-wait, and servers that do not speak the protocol.
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <collectives/bootstrap/c10d_store.hpp>

#include "support.hpp"

namespace boot = collectives::bootstrap;
using collectives::errc;
using collectives::error;
using namespace test_support;

namespace {

// torch's TCPStore in a python process of its own: started here, gone when this ends.
class torch_server {
 public:
  torch_server() {
    const char* python = std::getenv("TORCH_PYTHON");
    REQUIRE_MESSAGE(python != nullptr, "run this test through with_torch_python.sh, which sets TORCH_PYTHON");
    int to_child[2], from_child[2];
    REQUIRE(::pipe(to_child) == 0);
    REQUIRE(::pipe(from_child) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(to_child[0], 0);
      ::dup2(from_child[1], 1);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
      ::execl(python, python, "-u", TORCH_STORE_SERVER_SCRIPT, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    stdin_ = to_child[1];
    // Importing torch takes a few seconds on a loaded machine.
    std::string line;
    const auto until = clock::now() + 60s;
    while (line.find('\n') == std::string::npos && clock::now() < until) {
      pollfd p{from_child[0], POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buffer[64];
      const auto got = ::read(from_child[0], buffer, sizeof buffer);
      if (got <= 0) break;
      line.append(buffer, static_cast<std::size_t>(got));
    }
    ::close(from_child[0]);
    const std::string started = "torch's TCPStore did not start: '" + line + "'";
    REQUIRE_MESSAGE(line.find('\n') != std::string::npos, started);
    port_ = static_cast<std::uint16_t>(std::stoi(line));
  }
  ~torch_server() { stop(); }
  torch_server(const torch_server&) = delete;
  torch_server& operator=(const torch_server&) = delete;

  std::uint16_t port() const { return port_; }
  std::unique_ptr<boot::c10d_store> client(std::string prefix = "test/") const {
    return std::make_unique<boot::c10d_store>("127.0.0.1", port_, std::move(prefix), clock::now() + 5s,
                                              std::chrono::milliseconds(3000));
  }
  // Ends the server at once, as a crash of its host process would.
  void kill() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    stop();
  }

 private:
  void stop() {
    if (stdin_ >= 0) ::close(stdin_);  // the server's cue to exit
    stdin_ = -1;
    if (pid_ > 0) {
      int status = 0;
      for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(50ms);
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  std::uint16_t port_ = 0;
};

template <class Call>
std::string error_of(errc code, Call&& call) {
  try {
    call();
  } catch (const error& e) {
    CHECK_MESSAGE(e.code() == code, e.what());
    return e.what();
  }
  FAIL("no error was thrown");
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("c10d_store sets, gets, adds, waits and checks on torch's TCPStore") {
  torch_server server;
  auto a = server.client(), b = server.client();
  a->set("alpha", "one");
  CHECK(b->get("alpha", clock::now() + 2s) == "one");
  b->set("alpha", "uno");
  CHECK(a->get("alpha", clock::now() + 2s) == "uno");
  a->set("empty", "");
  CHECK(b->get("empty", clock::now() + 2s).empty());
  const std::string binary("\0\xff\n\x01", 4);
  a->set(std::string("key\0with nul", 12), binary);
  CHECK(b->get(std::string("key\0with nul", 12), clock::now() + 2s) == binary);
  CHECK(a->add("counter", 5) == 5);
  CHECK(b->add("counter", -7) == -2);
  CHECK(a->add("counter", 0) == -2);
  CHECK(b->get("counter", clock::now() + 2s) == "-2");  // counters read as decimal text, as in our stores
  CHECK(a->check({"alpha", "counter"}));
  CHECK_FALSE(a->check({"alpha", "missing"}));
  CHECK(a->check({}));
  a->wait({"alpha", "counter"}, clock::now() + 2s);
  const auto message = error_of(errc::protocol_error, [&] { a->add("alpha", 1); });
  CHECK_MESSAGE(contains(message, "cannot add to key 'alpha'"), message);
  CHECK(a->get("alpha", clock::now() + 2s) == "uno");  // the client goes on, and the add changed nothing
}

TEST_CASE("c10d_store reads what torch's own client wrote, and keeps to its prefix") {
  torch_server server;
  auto unprefixed = server.client(""), job = server.client("job/1/"), other = server.client("job/2/");
  CHECK(unprefixed->get("set-by-torch", clock::now() + 2s) == "hello from torch");
  CHECK(unprefixed->add("counter-from-torch", 1) == 42);
  job->set("k", "mine");
  CHECK(unprefixed->get("job/1/k", clock::now() + 2s) == "mine");
  CHECK_FALSE(other->check({"k"}));
  other->set("k", "theirs");
  CHECK(job->get("k", clock::now() + 2s) == "mine");
  CHECK(other->get("k", clock::now() + 2s) == "theirs");
}

TEST_CASE("c10d_store get and wait block until another client sets the key") {
  torch_server server;
  auto reader = server.client(), writer = server.client();
  const auto start = clock::now();
  std::thread later([&] {
    std::this_thread::sleep_for(150ms);
    writer->set("late", "here");
    std::this_thread::sleep_for(100ms);
    writer->set("later", "");
  });
  CHECK(reader->get("late", clock::now() + 5s) == "here");
  CHECK(since(start) >= 140ms);
  reader->wait({"late", "later"}, clock::now() + 5s);
  CHECK(since(start) >= 240ms);
  CHECK(since(start) < 3s);
  later.join();
}

TEST_CASE("c10d_store get and wait time out at their deadline, naming the key") {
  torch_server server;
  auto client = server.client();
  client->set("present", "yes");
  for (const bool use_wait : {false, true}) {
    CAPTURE(use_wait);
    const auto start = clock::now();
    const auto message = error_of(errc::timeout, [&] {
      if (use_wait)
        client->wait({"present", "never-set"}, start + 300ms);
      else
        client->get("never-set", start + 300ms);
    });
    CHECK(since(start) >= 300ms);
    CHECK(since(start) < 1500ms);
    CHECK_MESSAGE(contains(message, "waiting for key 'never-set' in the c10d store at 127.0.0.1:"), message);
  }
  // A deadline already passed still finds a key that is there.
  CHECK(client->get("present", clock::now() - 1s) == "yes");
  client->set("after", "a timeout");  // the client goes on, on a fresh connection
  CHECK(client->get("after", clock::now() + 1s) == "a timeout");
}

TEST_CASE("c10d_store: the barrier holds every rank until all arrive") {
  torch_server server;
  constexpr int ranks = 4;
  std::atomic<int> passed{0}, failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto store = server.client();
        for (int round = 0; round < 3; ++round) {
          boot::barrier(*store, "b", r, ranks, clock::now() + 10s);
          ++passed;
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(passed == 3 * ranks);
}

TEST_CASE("c10d_store: a server that goes away mid-wait is a clear error at once") {
  torch_server server;
  auto client = server.client();
  const auto start = clock::now();
  auto parked = std::async(std::launch::async, [&] { return client->get("never", clock::now() + 20s); });
  std::this_thread::sleep_for(300ms);
  server.kill();
  REQUIRE(parked.wait_for(5s) == std::future_status::ready);
  const auto message = error_of(errc::peer_lost, [&] { parked.get(); });
  CHECK_MESSAGE(contains(message, "lost the c10d store at 127.0.0.1:"), message);
  CHECK_MESSAGE(contains(message, "key 'never'"), message);
  CHECK(since(start) < 3s);
  const auto later = error_of(errc::peer_lost, [&] { client->set("after", "gone"); });
  CHECK_MESSAGE(contains(later, "reconnecting failed"), later);
}

TEST_CASE("c10d_store gives up at its connect deadline, and refuses a server that is no TCPStore") {
  const auto port = free_port();
  auto start = clock::now();
  auto message = error_of(errc::timeout, [&] { boot::c10d_store("127.0.0.1", port, "", start + 300ms); });
  CHECK(since(start) < 1500ms);
  CHECK_MESSAGE(contains(message, "could not reach the c10d store at 127.0.0.1:" + std::to_string(port)), message);

  // A server that hangs up on the first request, as one expecting another handshake may.
  boost::asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  std::thread hang_up([&] {
    boost::system::error_code ec;
    tcp::socket s = acceptor.accept(ec);
    char byte;
    if (!ec) s.read_some(boost::asio::buffer(&byte, 1), ec);
  });
  start = clock::now();
  message = error_of(errc::protocol_error, [&] {
    boot::c10d_store("127.0.0.1", acceptor.local_endpoint().port(), "", clock::now() + 2s);
  });
  hang_up.join();
  CHECK(since(start) < 2s);
  CHECK_MESSAGE(contains(message, "does not answer as torch 1.13's TCPStore does"), message);
}
