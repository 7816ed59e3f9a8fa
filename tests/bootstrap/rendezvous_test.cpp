// open_store: three threads as the ranks of a job meet through a TCP store (rank 0
// serving it) and through a file store, and exchange values; a rank with another
// job's token is refused; a busy MASTER_PORT is reported as such.
#include <doctest/doctest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/write.hpp>

#include <collectives/bootstrap/rendezvous.hpp>

#include "../scoped_env.hpp"
#include "support.hpp"

namespace boot = collectives::bootstrap;
namespace auth = collectives::auth;
using collectives::errc;
using namespace test_support;

namespace {

// Sets COLLECTIVES_STORE_DIR (or clears it) for one test, then restores it.
class store_dir_variable {
 public:
  explicit store_dir_variable(const std::optional<std::string>& value) {
    if (const char* v = std::getenv("COLLECTIVES_STORE_DIR")) saved_ = v;
    if (value)
      ::setenv("COLLECTIVES_STORE_DIR", value->c_str(), 1);
    else
      ::unsetenv("COLLECTIVES_STORE_DIR");
  }
  ~store_dir_variable() {
    if (saved_)
      ::setenv("COLLECTIVES_STORE_DIR", saved_->c_str(), 1);
    else
      ::unsetenv("COLLECTIVES_STORE_DIR");
  }

 private:
  std::optional<std::string> saved_;
};

boot::launch_info rank_of(int rank, int size, std::string address, std::uint16_t port) {
  boot::launch_info info;
  info.rank = rank;
  info.size = size;
  info.master_addr = std::move(address);
  info.master_port = port;
  info.origin = "arguments";
  return info;
}

// Each of three ranks publishes a value, reads the others', and waits at a barrier so
// that rank 0 keeps serving until all are done. Returns what each rank read.
std::array<std::string, 3> meet(const std::string& address, std::uint16_t port, const auth::job_token& token) {
  std::array<std::string, 3> read;
  std::array<bool, 3> served{};
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto session = boot::open_store(rank_of(r, 3, address, port), token, clock::now() + 5s);
        served[r] = session.server != nullptr;
        session.store->set("address/" + std::to_string(r), "rank " + std::to_string(r) + " is here");
        for (int other = 0; other < 3; ++other)
          read[r] += session.store->get("address/" + std::to_string(other), clock::now() + 5s) + ";";
        boot::barrier(*session.store, "leave", r, 3, clock::now() + 5s);
      } catch (const std::exception& e) {
        const std::string text = "rank " + std::to_string(r) + ": " + e.what();
        MESSAGE(text);
        ++failures;
      }
    });
  for (auto& t : ranks) t.join();
  CHECK(failures == 0);
  CHECK(served == std::array<bool, 3>{port != 0, false, false});
  return read;
}

const std::string everyone = "rank 0 is here;rank 1 is here;rank 2 is here;";

}  // namespace

TEST_CASE("three ranks meet through a TCP store that rank 0 serves") {
  store_dir_variable no_dir(std::nullopt);
  const auth::job_token token("rendezvous-token");
  for (const auto& read : meet("127.0.0.1", free_port(), token)) CHECK(read == everyone);
  if (ipv6_loopback_available()) {
    for (const auto& read : meet("[::1]", free_port("::1"), token)) CHECK(read == everyone);
  }
}

TEST_CASE("three ranks meet through a file store, in a directory of their own job") {
  temp_dir shared;
  store_dir_variable dir(shared.path().string());
  const auth::job_token token("file-rendezvous-token");
  for (const auto& read : meet("", 0, token)) CHECK(read == everyone);

  std::vector<std::filesystem::path> jobs(std::filesystem::directory_iterator(shared.path()), {});
  REQUIRE(jobs.size() == 1);
  const auto name = jobs[0].filename().string();
  CHECK(name.size() == 16);
  CHECK(std::all_of(name.begin(), name.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }));
  CHECK(name.find("file-rendezvous") == std::string::npos);  // the secret itself is not written anywhere

  // Another job in the same directory sees none of the first job's keys.
  auto other = boot::open_store(rank_of(0, 1, "", 0), auth::job_token("another-job"), clock::now() + 1s);
  CHECK_FALSE(other.store->check({"address/0"}));
  CHECK(std::distance(std::filesystem::directory_iterator(shared.path()), {}) == 2);
}

TEST_CASE("a rank with another job's token is refused by the TCP store") {
  store_dir_variable no_dir(std::nullopt);
  const auto port = free_port();
  auto rank0 = boot::open_store(rank_of(0, 2, "127.0.0.1", port), auth::job_token("job-a"), clock::now() + 2s);
  const auto start = clock::now();
  try {
    boot::open_store(rank_of(1, 2, "127.0.0.1", port), auth::job_token("job-b"), clock::now() + 2s);
    FAIL("a rank of another job was admitted");
  } catch (const collectives::error& e) {
    CHECK(e.code() == errc::unauthorized);
  }
  CHECK(since(start) < 1s);
  rank0.store->set("still", "serving");
  CHECK(rank0.store->get("still", clock::now() + 1s) == "serving");
}

TEST_CASE("rank 0's store listens on MASTER_ADDR when it is an address, on every interface when told to") {
  store_dir_variable no_dir(std::nullopt);
  // Whether something accepts connections on 127.0.0.2 (also this host's loopback).
  auto reachable_on_another_loopback = [](std::uint16_t port) {
    boost::asio::io_context io;
    tcp::socket socket(io);
    boost::system::error_code ec;
    socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.2"), port), ec);
    return !ec;
  };
  for (const char* listen : {static_cast<const char*>(nullptr), "master_addr", "any"}) {
    INFO("COLLECTIVES_STORE_LISTEN=", listen ? listen : "(unset)");
    scoped_env setting("COLLECTIVES_STORE_LISTEN", listen);
    const auto port = free_port();
    const auto session = boot::open_store(rank_of(0, 1, "127.0.0.1", port), auth::job_token("job"), clock::now() + 2s);
    REQUIRE(session.server != nullptr);
    CHECK(reachable_on_another_loopback(port) == (listen && std::string_view(listen) == "any"));
  }
  // A host name: every interface, since the name may mean another address elsewhere.
  const auto port = free_port();
  const auto session = boot::open_store(rank_of(0, 1, "localhost", port), auth::job_token("job"), clock::now() + 2s);
  CHECK(reachable_on_another_loopback(port));
}

TEST_CASE("a busy MASTER_PORT on rank 0 is reported as such") {
  store_dir_variable no_dir(std::nullopt);
  boost::asio::io_context io;
  tcp::acceptor squatter(io, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  const auto port = squatter.local_endpoint().port();
  try {
    boot::open_store(rank_of(0, 2, "127.0.0.1", port), auth::job_token("job"), clock::now() + 1s);
    FAIL("rank 0 served a store on a busy port");
  } catch (const collectives::error& e) {
    CHECK(e.code() == errc::invalid_config);
    CHECK_MESSAGE(std::string(e.what()).starts_with("MASTER_PORT " + std::to_string(port) + " is in use on this host"),
                  e.what());
  }
}

namespace {

// Something that is not a store on a port: it takes one connection, then answers
// `reply` and hangs up (an empty reply: hangs up at once), or keeps silent until the
// test ends.
class stranger {
 public:
  stranger(std::string reply, bool silent) : acceptor_(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this, reply = std::move(reply), silent] {
      boost::system::error_code ec;
      tcp::socket socket(io_);
      acceptor_.accept(socket, ec);
      if (ec) return;
      if (silent) {
        std::unique_lock lock(mutex_);
        done_.wait(lock, [&] { return finished_; });
        return;
      }
      boost::asio::write(socket, boost::asio::buffer(reply), ec);
      socket.close(ec);
    });
  }
  ~stranger() {
    {
      std::lock_guard lock(mutex_);
      finished_ = true;
    }
    done_.notify_all();
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  std::mutex mutex_;
  std::condition_variable done_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace

TEST_CASE("a rank other than 0 that finds another program on MASTER_PORT says so, not that it was refused") {
  store_dir_variable no_dir(std::nullopt);
  const std::pair<std::string, bool> strangers[] = {
      {"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n...........................", false},  // garbage
      {"", false},                                                                                  // hangs up
      {"", true},                                                                                   // silent
  };
  for (const auto& one : strangers) {
    const std::string& reply = one.first;  // (not a structured binding: clang 14 lets no macro's lambda capture one)
    const bool silent = one.second;
    CAPTURE(reply);
    CAPTURE(silent);
    stranger other(reply, silent);
    const auto start = clock::now();
    try {
      boot::open_store(rank_of(1, 2, "127.0.0.1", other.port()), auth::job_token("job"), clock::now() + 1500ms);
      FAIL("a rank joined a store that is not there");
    } catch (const collectives::error& e) {
      CHECK(e.code() == errc::protocol_error);
      const std::string expected = "MASTER_ADDR:MASTER_PORT (127.0.0.1:" + std::to_string(other.port()) +
                                   ") is served by something that is not this job's store (another program holds "
                                   "the port?): what answers at 127.0.0.1:" + std::to_string(other.port()) +
                                   " is not a collectives store: ";
      CHECK_MESSAGE(std::string(e.what()).starts_with(expected), e.what());
    }
    CHECK(since(start) < 3s);
  }
}

TEST_CASE("the ranks of one host meet in a private directory, agree on a fresh token, and the last one removes it") {
  store_dir_variable no_dir(std::nullopt);
  const std::string job = "test job " + std::to_string(::getpid()) + " " + std::to_string(clock::now().time_since_epoch().count());
  const auto directory = boot::open_private_directory(job + " communicator 0");  // where the ranks will meet
  struct stat info {};
  REQUIRE(::lstat(directory.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  CHECK(info.st_uid == ::getuid());

  std::array<std::string, 3> tokens, read;
  std::atomic<int> failures{0};
  {
    std::array<std::optional<boot::store_session>, 3> sessions;
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.emplace_back([&, r] {
        try {
          auto launch = rank_of(r, 3, "", 0);
          launch.job_on_this_host = job;
          auto session = boot::open_store(launch, auth::job_token::from_env(false), clock::now() + 5s);
          if (session.agreed_token) tokens[r] = session.agreed_token->secret();
          session.store->set("address/" + std::to_string(r), "rank " + std::to_string(r) + " is here");
          for (int other = 0; other < 3; ++other)
            read[r] += session.store->get("address/" + std::to_string(other), clock::now() + 5s) + ";";
          boot::barrier(*session.store, "leave", r, 3, clock::now() + 5s);
          sessions[r].emplace(std::move(session));
        } catch (const std::exception& e) {
          const std::string text = "rank " + std::to_string(r) + ": " + e.what();
          MESSAGE(text);
          ++failures;
        }
      });
    for (auto& t : ranks) t.join();
    REQUIRE(failures == 0);
    CHECK(read == std::array<std::string, 3>{everyone, everyone, everyone});
    CHECK(tokens[0].size() == 64);
    CHECK(tokens[1] == tokens[0]);
    CHECK(tokens[2] == tokens[0]);
    sessions[0].reset();
    sessions[2].reset();
    CHECK(std::filesystem::exists(directory));  // rank 1 is still in it
  }
  CHECK(!std::filesystem::exists(directory));
}

TEST_CASE("a start-up that fails because a rank never comes leaves no private directory behind") {
  // Rank 0 of two waits for rank 1's address, as a transport's start-up does, and
  // gives up; rank 1 comes later, after rank 0 has left, and gives up too.
  store_dir_variable no_dir(std::nullopt);
  const std::string job = "lonely " + std::to_string(::getpid()) + " " + std::to_string(clock::now().time_since_epoch().count());
  const auto directory = boot::private_directory_of(job + " communicator 0");
  for (const int r : {0, 1}) {
    auto launch = rank_of(r, 2, "", 0);
    launch.job_on_this_host = job;
    try {
      auto session = boot::open_store(launch, auth::job_token::from_env(false), clock::now() + 2s);
      session.store->set("address/" + std::to_string(r), "here");
      session.store->get("address/" + std::to_string(1 - r), clock::now() + 200ms);
      FAIL("rank " << r << " found its peer, which never came");
    } catch (const collectives::error& e) {
      CHECK(e.code() == errc::timeout);
    }
    CHECK_MESSAGE(!std::filesystem::exists(directory), "after rank " << r << " left: " << directory.string());
  }
}

TEST_CASE("ranks that leave at the same moment remove their directory once and warn of nothing") {
  // Each rank counts itself out of the directory; one that still used the store after
  // counting out could find the directory gone (the last one out had removed it) and
  // warn "could not leave the job's directory" (seen under mpiexec, 3 ranks).
  store_dir_variable no_dir(std::nullopt);
  const std::string job = "together " + std::to_string(::getpid()) + " " + std::to_string(clock::now().time_since_epoch().count());
  constexpr int size = 4, rounds = 50;
  std::atomic<int> failures{0}, leaving{0};
  stderr_capture capture;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          auto launch = rank_of(r, size, "", 0);
          launch.job_on_this_host = job;
          auto session = boot::open_store(launch, auth::job_token::from_env(false), clock::now() + 5s);
          boot::barrier(*session.store, "leave", r, size, clock::now() + 5s);
          leaving.fetch_add(1);
          for (const auto until = clock::now() + 5s; leaving.load() < size * (round + 1) && clock::now() < until;)
            std::this_thread::yield();
        } catch (const std::exception& e) {
          const std::string text = "rank " + std::to_string(r) + ", round " + std::to_string(round) + ": " + e.what();
          MESSAGE(text);
          ++failures;
        }
      });
    for (auto& t : ranks) t.join();
  }
  const std::string warnings = capture.finish();
  CHECK(failures == 0);
  CHECK_MESSAGE(warnings.empty(), warnings);
  for (int c = 0; c < rounds; ++c)
    CHECK(!std::filesystem::exists(boot::private_directory_of(job + " communicator " + std::to_string(c))));
}

TEST_CASE("communicators made one after another on one host each meet in a directory of their own") {
  // A rank that is done with one communicator goes on to the next while another still
  // leaves the first: the last one out must remove only the first one's directory.
  store_dir_variable no_dir(std::nullopt);
  const std::string job = "back to back " + std::to_string(::getpid()) + " " + std::to_string(clock::now().time_since_epoch().count());
  constexpr int communicators = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      for (int c = 0; c < communicators; ++c) {
        try {
          auto launch = rank_of(r, 3, "", 0);
          launch.job_on_this_host = job;
          auto session = boot::open_store(launch, auth::job_token::from_env(false), clock::now() + 5s);
          session.store->set("address/" + std::to_string(r), std::to_string(c));
          for (int other = 0; other < 3; ++other)
            if (session.store->get("address/" + std::to_string(other), clock::now() + 5s) != std::to_string(c)) ++failures;
          if (r == 1) std::this_thread::sleep_for(20ms);  // the last to leave, while the others go on
        } catch (const std::exception& e) {
          const std::string text = "rank " + std::to_string(r) + ", communicator " + std::to_string(c) + ": " + e.what();
          MESSAGE(text);
          ++failures;
        }
      }
    });
  for (auto& t : ranks) t.join();
  CHECK(failures == 0);
  for (int c = 0; c < communicators; ++c) {
    const auto directory = boot::private_directory_of(job + " communicator " + std::to_string(c));
    CHECK_MESSAGE(!std::filesystem::exists(directory), directory.string());
  }
}

TEST_CASE("a private directory that another user could have made is refused") {
  const std::string job = "squatted job " + std::to_string(::getpid());
  const auto directory = boot::open_private_directory(job);
  ::chmod(directory.c_str(), 0755);
  try {
    boot::open_private_directory(job);
    FAIL("a directory others may enter was taken for private");
  } catch (const collectives::error& e) {
    CHECK(e.code() == errc::invalid_config);
    CHECK_MESSAGE(std::string(e.what()).starts_with("the job's directory " + directory.string() + " (for " + job +
                                                    ") is not a directory of this user that only it may enter"),
                  e.what());
  }
  std::filesystem::remove(directory);
}
