// Both stores pass the same checks: set/get/add/wait/check, blocking and timing out,
// binary values, exact concurrent adds, the barrier. Then what only one of them has:
// TCP connection retries, IPv6, a server that goes away; file-store adds from several
// processes and a stale lock.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>
#include <future>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <collectives/bootstrap/file_store.hpp>
#include <collectives/bootstrap/tcp_store.hpp>

#include "support.hpp"

namespace boot = collectives::bootstrap;
using collectives::errc;
using collectives::error;
using namespace test_support;

namespace {

const collectives::auth::job_token token("store-test-token");

struct tcp_backend {
  static constexpr int adds_per_thread = 1000;
  boot::tcp_store_server server{{boost::asio::ip::make_address("127.0.0.1"), 0}, token};
  std::unique_ptr<boot::key_value_store> client() {
    return std::make_unique<boot::tcp_store>("127.0.0.1", server.port(), token, clock::now() + 5s);
  }
};

struct file_backend {
  // A file-store add is a lock file, a read, a write and a rename: up to 1.5 ms each on
  // this VM's ext4. Fewer adds keep the test short; every count must still be seen once.
  static constexpr int adds_per_thread = 250;
  temp_dir dir;
  std::unique_ptr<boot::key_value_store> client() { return std::make_unique<boot::file_store>(dir.path() / "store"); }
};

// Runs `call`, which must throw collectives::error `code`; returns its message.
template <class Call>
std::string error_of(errc code, Call&& call) {
  try {
    call();
  } catch (const error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("no error was thrown");
  return {};
}

}  // namespace

TEST_CASE_TEMPLATE("a store sets, gets, adds, waits and checks", Backend, tcp_backend, file_backend) {
  Backend backend;
  auto a = backend.client(), b = backend.client();
  a->set("alpha", "one");
  CHECK(b->get("alpha", clock::now() + 2s) == "one");
  b->set("alpha", "uno");
  CHECK(a->get("alpha", clock::now() + 2s) == "uno");
  CHECK(a->add("counter", 5) == 5);
  CHECK(b->add("counter", -7) == -2);
  CHECK(a->add("counter", 0) == -2);
  CHECK(b->get("counter", clock::now() + 2s) == "-2");  // counters read as decimal text
  CHECK(a->check({"alpha", "counter"}));
  CHECK_FALSE(a->check({"alpha", "missing"}));
  a->wait({"alpha", "counter"}, clock::now() + 2s);
  const auto message = error_of(errc::protocol_error, [&] { a->add("alpha", 1); });
  CHECK(message.find("'alpha'") != std::string::npos);
  CHECK(a->get("alpha", clock::now() + 2s) == "uno");  // the failed add changed nothing
}

TEST_CASE_TEMPLATE("get and wait block until another client sets the key", Backend, tcp_backend, file_backend) {
  Backend backend;
  auto reader = backend.client(), writer = backend.client();
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

TEST_CASE_TEMPLATE("get and wait time out at their deadline", Backend, tcp_backend, file_backend) {
  Backend backend;
  auto client = backend.client();
  for (const bool use_wait : {false, true}) {
    const auto start = clock::now();
    const auto message = error_of(errc::timeout, [&] {
      if (use_wait)
        client->wait({"never-set"}, start + 300ms);
      else
        client->get("never-set", start + 300ms);
    });
    CHECK(since(start) >= 300ms);
    CHECK(since(start) < 800ms);
    CHECK(message.find("'never-set'") != std::string::npos);
  }
  client->set("after", "a timeout");  // the client still works
  CHECK(client->get("after", clock::now() + 1s) == "a timeout");
}

TEST_CASE_TEMPLATE("values are binary-safe and keys may hold any bytes", Backend, tcp_backend, file_backend) {
  Backend backend;
  auto a = backend.client(), b = backend.client();
  std::string every_byte;
  for (int i = 0; i < 256; ++i) every_byte.push_back(static_cast<char>(i));
  std::string mebibyte(1 << 20, '\0');
  std::mt19937 random(42);
  for (auto& c : mebibyte) c = static_cast<char>(random());
  const std::vector<std::pair<std::string, std::string>> entries = {
      {"empty", ""},
      {"nul", std::string("a\0b", 3)},
      {"every byte", every_byte},
      {"mebibyte", mebibyte},
      {"", "empty key"},
      {"a/b", "slash"},
      {"..", "dot dot"},
      {"../../escape", "parent"},
      {std::string("k\0ey", 4), "nul in key"},
      {std::string(3000, 'x'), "long key"},
      {"caf\xc3\xa9", "utf-8"},
  };
  for (const auto& [key, value] : entries) a->set(key, value);
  for (const auto& [key, value] : entries) CHECK(b->get(key, clock::now() + 2s) == value);
  error_of(errc::count_overflow, [&] { a->set(std::string(boot::max_key_size + 1, 'k'), "v"); });
  error_of(errc::count_overflow, [&] { a->set("big", std::string(boot::max_value_size + 1, 'v')); });
}

TEST_CASE_TEMPLATE("concurrent adds from 8 threads are exact", Backend, tcp_backend, file_backend) {
  Backend backend;
  constexpr int threads = 8, adds = Backend::adds_per_thread;
  std::vector<std::vector<std::int64_t>> seen(threads);
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      try {
        auto client = backend.client();
        for (int i = 0; i < adds; ++i) seen[t].push_back(client->add("total", 1));
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& w : workers) w.join();
  REQUIRE(failures == 0);
  std::vector<std::int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> expected(threads * adds);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all == expected);  // every add saw a distinct count: none was lost or doubled
  CHECK(backend.client()->get("total", clock::now() + 1s) == std::to_string(threads * adds));
}

TEST_CASE_TEMPLATE("the barrier holds every rank until all arrive, round after round", Backend, tcp_backend,
                   file_backend) {
  Backend backend;
  constexpr int ranks = 4, rounds = 3;
  std::array<std::atomic<int>, rounds> arrived{};
  std::atomic<int> early{0}, failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto store = backend.client();
        for (int round = 0; round < rounds; ++round) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));
          ++arrived[round];
          boot::barrier(*store, "step", r, ranks, clock::now() + 5s);
          if (arrived[round] != ranks) ++early;
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(early == 0);

  auto alone = backend.client();
  const auto message = error_of(errc::timeout, [&] { boot::barrier(*alone, "lonely", 0, 2, clock::now() + 200ms); });
  CHECK(message.find("1 of 2 ranks had arrived") != std::string::npos);
}

TEST_CASE("a TCP store serves a few hundred clients parked on one key, all released by one set") {
  constexpr int clients = 200;
  boot::tcp_store_server server({boost::asio::ip::make_address("127.0.0.1"), 0}, token);
  std::atomic<int> released{0}, failures{0};
  std::vector<std::thread> waiters;
  for (int c = 0; c < clients; ++c)
    waiters.emplace_back([&] {
      try {
        boot::tcp_store client("127.0.0.1", server.port(), token, clock::now() + 10s);
        if (client.get("go", clock::now() + 10s) == "now") ++released;
      } catch (const std::exception&) {
        ++failures;
      }
    });
  const auto until = clock::now() + 10s;
  while (server.clients() < clients && failures == 0 && clock::now() < until) std::this_thread::sleep_for(5ms);
  CHECK(server.clients() == clients);
  std::this_thread::sleep_for(50ms);  // let the last ones' gets reach the server
  const auto start = clock::now();
  boot::tcp_store("127.0.0.1", server.port(), token, clock::now() + 2s).set("go", "now");
  for (auto& w : waiters) w.join();
  CHECK(failures == 0);
  CHECK(released == clients);
  CHECK(since(start) < 2s);
}

TEST_CASE("a TCP client retries until the server starts") {
  const auto port = free_port();
  auto connected = std::async(std::launch::async, [port] {
    boot::tcp_store client("127.0.0.1", port, token, clock::now() + 5s);
    return client.get("greeting", clock::now() + 5s);
  });
  std::this_thread::sleep_for(300ms);
  boot::tcp_store_server server({boost::asio::ip::make_address("127.0.0.1"), port}, token);
  boot::tcp_store("127.0.0.1", port, token, clock::now() + 2s).set("greeting", "hello");
  REQUIRE(connected.wait_for(5s) == std::future_status::ready);
  CHECK(connected.get() == "hello");
}

TEST_CASE("a TCP client gives up at its connect deadline with the last error") {
  const auto port = free_port();
  const auto start = clock::now();
  const auto message = error_of(errc::timeout, [&] { boot::tcp_store("127.0.0.1", port, token, start + 300ms); });
  CHECK(since(start) >= 300ms);
  CHECK(since(start) < 1500ms);
  CHECK(message.find("could not reach the store at 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(message.find("last error") != std::string::npos);
}

TEST_CASE("a TCP store works over IPv6 loopback and with a host name") {
  if (!ipv6_loopback_available()) {
    MESSAGE("skipped the IPv6 part: this host has no IPv6 loopback");
  } else {
    boot::tcp_store_server server({boost::asio::ip::make_address("::1"), 0}, token);
    boot::tcp_store plain("::1", server.port(), token, clock::now() + 2s);
    boot::tcp_store bracketed("[::1]", server.port(), token, clock::now() + 2s);
    plain.set("v6", "yes");
    CHECK(bracketed.get("v6", clock::now() + 1s) == "yes");
  }
  boot::tcp_store_server server({boost::asio::ip::make_address("127.0.0.1"), 0}, token);
  boot::tcp_store named("localhost", server.port(), token, clock::now() + 2s);  // whichever address answers
  named.set("name", "resolved");
  CHECK(named.get("name", clock::now() + 1s) == "resolved");
}

TEST_CASE("destroying the TCP server fails a parked get at once instead of hanging") {
  auto server = std::make_unique<boot::tcp_store_server>(
      boost::asio::ip::tcp::endpoint{boost::asio::ip::make_address("127.0.0.1"), 0}, token);
  boot::tcp_store client("127.0.0.1", server->port(), token, clock::now() + 2s);
  const auto start = clock::now();
  auto parked = std::async(std::launch::async, [&] { return client.get("never", clock::now() + 10s); });
  std::this_thread::sleep_for(200ms);
  server.reset();
  REQUIRE(parked.wait_for(3s) == std::future_status::ready);
  const auto message = error_of(errc::peer_lost, [&] { parked.get(); });
  CHECK(message.find("lost the store at 127.0.0.1:") != std::string::npos);
  CHECK(since(start) < 2s);
  error_of(errc::peer_lost, [&] { client.set("after", "gone"); });
}

TEST_CASE("file store adds are atomic across processes") {
  temp_dir dir;
  constexpr int processes = 4, adds = 250;
  std::vector<pid_t> children;
  for (int p = 0; p < processes; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int status = 0;
      try {
        boot::file_store store(dir.path());
        for (int i = 0; i < adds; ++i) store.add("shared", 1);
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  const auto until = clock::now() + 20s;
  int failed = 0;
  for (const pid_t child : children) {
    int status = 0;
    while (::waitpid(child, &status, WNOHANG) == 0) {
      if (clock::now() > until) {
        ::kill(child, SIGKILL);
        ::waitpid(child, &status, 0);
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  CHECK(failed == 0);
  CHECK(boot::file_store(dir.path()).get("shared", clock::now() + 1s) == std::to_string(processes * adds));
}

TEST_CASE("file store keys stay inside the directory, and a stale lock is reported") {
  temp_dir dir;
  boot::file_store store(dir.path(), 200ms);
  store.set("../outside", "x");
  store.set("/etc/passwd", "y");
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) CHECK(entry.is_regular_file());
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 2);
  CHECK_FALSE(std::filesystem::exists(dir.path().parent_path() / "outside"));

  const auto lock = dir.path() / (boot::detail::key_file_name("held") + ".lock");
  { std::ofstream{lock}; }
  const auto start = clock::now();
  const auto message = error_of(errc::timeout, [&] { store.add("held", 1); });
  CHECK(since(start) >= 200ms);
  CHECK(since(start) < 1s);
  CHECK(message.find(lock.string()) != std::string::npos);
}
