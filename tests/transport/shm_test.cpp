// The shared-memory transport with ranks as threads of this process (and, where a
// process must die, a forked child): message matching in every order, fragments that
// split elements, sizes that don't fit, sleeping without lost wake-ups, abort, a peer
// that leaves or dies, start-up failures, and nothing left behind in /dev/shm; large
// messages read from a sending process's memory, and that process dying before it is read.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <thread>

#include <collectives/collectives.hpp>
#include <collectives/transport/shm.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using namespace std::chrono_literals;

namespace {

// A segment name no other test (or test process) uses.
std::string fresh_name() {
  static std::atomic<int> made{0};
  return "collectives-test-" + std::to_string(::getpid()) + "-" + std::to_string(made++);
}

bool in_dev_shm(const std::string& name) { return std::filesystem::exists("/dev/shm/" + name); }

coll::shm_options small_fifos() {
  coll::shm_options o;
  o.slot_bytes = 1000;  // rounded up to 1024, which no 12-byte element divides
  o.slots = 2;
  o.startup_timeout = 20s;
  return o;
}

// Runs fn(communicator&) for ranks 0..size-1 on threads; rethrows the first failure.
template <class Fn>
void run_shm_ranks(int size, Fn fn, coll::shm_options options = {}, std::chrono::milliseconds timeout = 20s,
                   std::string name = fresh_name()) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < size; ++r)
      ranks.emplace_back([&, r] {
        try {
          coll::communicator<coll::shm> comm(coll::shm(r, size, name, options), timeout);
          fn(comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  CHECK_FALSE(in_dev_shm(name));
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::span<const std::byte> out_bytes(const std::vector<int>& v) { return std::as_bytes(std::span{v}); }
std::span<std::byte> in_bytes(std::vector<int>& v) { return std::as_writable_bytes(std::span{v}); }

// Completes every request or fails at the deadline.
void wait_all(coll::shm& t, std::vector<coll::shm::request> pending, std::chrono::milliseconds limit = 10s) {
  const auto until = coll::clock::now() + limit;
  while (!pending.empty()) {
    std::erase_if(pending, [&](coll::shm::request& r) { return t.test(r); });
    if (!pending.empty() && !t.wait_for_activity(until)) FAIL("requests still pending at the deadline");
  }
}

std::vector<int> iota(std::size_t n, int from) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

coll::errc code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const coll::error& e) {
    return coll::errc(e.code().value());
  }
  return coll::errc{};
}

struct vec3 {  // 12 bytes: splits across 1024-byte fragments
  float x, y, z;
};
struct vec3_sum {
  static constexpr bool commutative = true;
  vec3 operator()(vec3 a, vec3 b) const { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
};

}  // namespace

TEST_CASE("all_reduce over shm matches a serial sum, for every algorithm and rank count") {
  coll::shm_options one_copy;
  one_copy.limits.one_copy_bytes = 256 * 1024;
  auto check = [](int p, std::size_t n, const coll::shm_options& options) {
    CAPTURE(p);
    CAPTURE(n);
    CAPTURE(options.limits.one_copy_bytes);
    run_shm_ranks(
        p,
        [&](auto& comm) {
          auto input = [&](int r) {
            std::vector<double> v(n);
            for (std::size_t i = 0; i < n; ++i) v[i] = double((i * 7 + std::size_t(r) * 3) % 1000);
            return v;
          };
          std::vector<double> expected(n, 0.0);
          for (int r = 0; r < p; ++r) {
            const auto v = input(r);
            for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
          }
          auto ring = input(comm.rank()), tree = ring, direct = ring;
          coll::all_reduce<coll::ring>(comm, std::span{ring}, coll::sum{});
          coll::all_reduce<coll::double_binary_tree>(comm, std::span{tree}, coll::sum{});
          coll::all_reduce<coll::direct>(comm, std::span{direct}, coll::sum{});
          CHECK(ring == expected);
          CHECK(tree == expected);
          CHECK(direct == expected);
        },
        options);
  };
  const std::size_t large = (std::size_t(1) << 20) + 3;
  for (int p : {1, 2, 3, 5})
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), large}) check(p, n, {});
  // Large messages read from the sender's memory (here a plain copy: the ranks are threads).
  check(3, large, one_copy);
}

TEST_CASE("a fused receive gets whole elements when fragments split them") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    const std::size_t n = 5000;  // 60000 bytes: many 1024-byte fragments through 2-slot FIFOs
    run_shm_ranks(
        p,
        [&](auto& comm) {
          std::vector<vec3> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = {float(comm.rank() + 1), float(i % 13), float(comm.rank() * i % 5)};
          coll::all_reduce<coll::ring>(comm, std::span{v}, vec3_sum{});
          for (std::size_t i = 0; i < n; ++i) {
            float x = 0, y = 0, z = 0;
            for (int r = 0; r < p; ++r) x += float(r + 1), y += float(i % 13), z += float(r * i % 5);
            if (v[i].x != x || v[i].y != y || v[i].z != z) FAIL("element " << i << " differs");
          }
        },
        small_fifos());
  }
}

TEST_CASE("messages match by tag whatever the order of sends and receives") {
  run_shm_ranks(
      2,
      [](auto& comm) {
        auto& t = comm.transport();
        const auto big = iota(40000, 5);  // 160000 bytes: larger than an early message, held in the FIFO
        if (t.rank() == 0) {
          // Small ones first in one order, an empty one, then the big one.
          std::vector<coll::shm::request> sent;
          std::vector<std::vector<int>> small;
          for (int m = 0; m < 10; ++m) small.push_back(iota(std::size_t(m) * 100 + 1, m));
          for (int m = 0; m < 10; ++m) sent.push_back(t.post_send(1, {1, std::uint32_t(m)}, out_bytes(small[std::size_t(m)])));
          sent.push_back(t.post_send(1, {1, 99}, {}));
          sent.push_back(t.post_send(1, {1, 100}, out_bytes(big)));
          wait_all(t, std::move(sent));
        } else {
          std::this_thread::sleep_for(20ms);  // let the small ones arrive early
          std::vector<int> got_big(big.size());
          std::vector<coll::shm::request> posted{t.post_recv(0, {1, 100}, in_bytes(got_big)), t.post_recv(0, {1, 99}, {})};
          std::vector<std::vector<int>> got(10);
          for (int m = 9; m >= 0; --m) {  // the reverse order
            got[std::size_t(m)].resize(std::size_t(m) * 100 + 1);
            posted.push_back(t.post_recv(0, {1, std::uint32_t(m)}, in_bytes(got[std::size_t(m)])));
          }
          wait_all(t, std::move(posted));
          CHECK(got_big == big);
          for (int m = 0; m < 10; ++m) CHECK(got[std::size_t(m)] == iota(std::size_t(m) * 100 + 1, m));
        }
      },
      small_fifos());
}

TEST_CASE("a message that doesn't fit fails only its own receive") {
  run_shm_ranks(2, [](auto& comm) {
    auto& t = comm.transport();
    const auto longer = iota(100, 0), shorter = iota(10, 0), fine = iota(50, 7);
    if (t.rank() == 0) {
      wait_all(t, {t.post_send(1, {2, 0}, out_bytes(longer)), t.post_send(1, {2, 1}, out_bytes(shorter)),
                   t.post_send(1, {2, 2}, out_bytes(fine))});
    } else {
      std::vector<int> a(50), b(50), c(50);
      auto ra = t.post_recv(0, {2, 0}, in_bytes(a));
      CHECK(code_of([&] { wait_all(t, {ra}); }) == coll::errc::message_truncated);
      auto rb = t.post_recv(0, {2, 1}, in_bytes(b));
      CHECK(code_of([&] { wait_all(t, {rb}); }) == coll::errc::buffer_size_mismatch);
      wait_all(t, {t.post_recv(0, {2, 2}, in_bytes(c))});
      CHECK(c == fine);
    }
  });
}

// Rank `rank` of 2 in its own process: a ring all_reduce of floats and a broadcast of
// an odd number of bytes, both in messages far above one_copy_bytes, checked against
// serial results. Returns 0 if right and read from the peer's memory, 1 if right
// through the FIFO, 2 if wrong.
int large_messages_between_processes(int rank, const std::string& name) {
  const std::size_t n = (std::size_t(1) << 20) + 3, bytes = (std::size_t(3) << 20) + 5;
  auto input = [&](int r) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float((i * 5 + std::size_t(r) * 11) % 97);
    return v;
  };
  coll::shm_options options;
  options.limits.one_copy_bytes = 256 * 1024;
  coll::communicator<coll::shm> comm(coll::shm(rank, 2, name, options), 20s);
  coll::barrier(comm);  // both have tried reading the other's memory
  auto v = input(rank);
  const auto a = input(0), b = input(1);
  coll::all_reduce<coll::ring>(comm, std::span{v}, coll::sum{});
  std::vector<std::byte> message(bytes);
  if (rank == 0)
    for (std::size_t i = 0; i < bytes; ++i) message[i] = std::byte(i * 31 % 251);
  coll::broadcast(comm, std::span{message}, 0);
  bool right = true;
  for (std::size_t i = 0; i < n; ++i) right = right && v[i] == a[i] + b[i];
  for (std::size_t i = 0; i < bytes; ++i) right = right && message[i] == std::byte(i * 31 % 251);
  return !right ? 2 : comm.transport().reads_memory_of(1 - rank) ? 0 : 1;
}

TEST_CASE("large messages between processes go in one copy, read from the sender's memory") {
  const std::string name = fresh_name();
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 3;
    try {
      code = large_messages_between_processes(1, name);
    } catch (...) {
    }
    ::_exit(code);
  }
  REQUIRE(child > 0);
  const int mine = large_messages_between_processes(0, name);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(mine != 2);
  CHECK(WEXITSTATUS(status) == mine);  // right, and both read the same way
  if (mine == 1) MESSAGE("this kernel refuses process_vm_readv between these processes: large messages went through the FIFOs");
  CHECK_FALSE(in_dev_shm(name));
}

TEST_CASE("a sender that dies before its large message is read is reported as lost") {
  const std::string name = fresh_name();
  const std::vector<int> large = iota(1 << 20, 0);  // 4 MiB: sent by address where the kernel allows
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      coll::shm_options options;
      options.limits.one_copy_bytes = 256 * 1024;
      coll::shm t(1, 2, name, options);
      int hello = 1;
      wait_all(t, {t.post_send(0, {1, 0}, std::as_bytes(std::span(&hello, 1)))});
      wait_all(t, {t.post_recv(0, {1, 0}, std::as_writable_bytes(std::span(&hello, 1)))});  // rank 0 has looked at this one
      auto sent = t.post_send(0, {2, 0}, out_bytes(large));
      (void)sent;
      ::kill(::getpid(), SIGKILL);  // gone before rank 0 reads
    } catch (...) {
    }
    ::_exit(3);
  }
  REQUIRE(child > 0);
  coll::shm_options options;
  options.limits.one_copy_bytes = 256 * 1024;
  coll::shm t(0, 2, name, options);
  int hello = 0;
  wait_all(t, {t.post_recv(1, {1, 0}, std::as_writable_bytes(std::span(&hello, 1)))});
  wait_all(t, {t.post_send(1, {1, 0}, std::as_bytes(std::span(&hello, 1)))});
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);  // dead, and its memory with it
  CHECK(WIFSIGNALED(status));
  std::vector<int> got(large.size());
  try {
    wait_all(t, {t.post_recv(1, {2, 0}, in_bytes(got))}, 10s);
    FAIL("the receive should fail");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::peer_lost);
    CHECK(std::string(e.what()).find("lost rank 1: its process (pid " + std::to_string(child) + ") died") != std::string::npos);
  }
  CHECK_FALSE(in_dev_shm(name));
}

TEST_CASE("sleeping ranks lose no wake-up") {
  coll::shm_options o;
  o.limits.poll_time = o.limits.oversubscribed_poll_time = 0us;  // every wait goes to sleep on the futex
  run_shm_ranks(
      2,
      [](auto& comm) {
        auto& t = comm.transport();
        std::vector<int> one(1);
        for (int i = 0; i < 5000; ++i) {
          if ((i % 2) == t.rank()) {
            one[0] = i;
            wait_all(t, {t.post_send(1 - t.rank(), {3, std::uint32_t(i)}, out_bytes(one))}, 5s);
          } else {
            wait_all(t, {t.post_recv(1 - t.rank(), {3, std::uint32_t(i)}, in_bytes(one))}, 5s);
            REQUIRE(one[0] == i);
          }
        }
      },
      o);
}

TEST_CASE("eight ranks on this machine's cores all progress") {
  run_shm_ranks(8, [](auto& comm) {
    for (std::size_t n : {std::size_t(1), std::size_t(100003)}) {
      std::vector<float> v(n, float(comm.rank() + 1));
      coll::all_reduce(comm, std::span{v}, coll::sum{});
      CHECK(std::all_of(v.begin(), v.end(), [](float x) { return x == 36.0f; }));
    }
  });
}

TEST_CASE("abort from another thread wakes every sleeping rank") {
  run_shm_ranks(2, [&](auto& comm) {
    auto& t = comm.transport();
    std::jthread aborter;
    if (t.rank() == 1)
      aborter = std::jthread([&] {
        std::this_thread::sleep_for(100ms);
        comm.abort();
      });
    std::vector<int> x(4);  // a message nobody sends
    const auto started = coll::clock::now();
    try {
      wait_all(t, {t.post_recv(1 - t.rank(), {4, 0}, in_bytes(x))}, 10s);
      FAIL("the receive should fail");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::aborted);
      CHECK(std::string(e.what()).find("aborted by " + std::string(t.rank() == 1 ? "this rank" : "rank 1")) != std::string::npos);
    }
    CHECK(coll::clock::now() - started < 5s);
  });
}

TEST_CASE("a rank that closes its communicator is reported, not waited for") {
  run_shm_ranks(2, [](auto& comm) {
    if (comm.rank() == 1) return;  // leaves at once
    std::vector<int> x(4);
    try {
      coll::broadcast(comm, std::span{x}, 1);
      FAIL("the broadcast should fail");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::peer_lost);
      CHECK(std::string(e.what()).find("rank 1 closed its communicator") != std::string::npos);
    }
  });
}

TEST_CASE("a rank that leaves while a peer still expects its message is named first by the others") {
  // Rank 1 returns at once; rank 0 waits for its message, fails, and leaves; rank 2,
  // waiting on rank 0, names rank 1: it left first.
  std::string third;
  run_shm_ranks(3, [&](auto& comm) {
    std::vector<int> x(4);
    if (comm.rank() == 1) return;
    try {
      coll::recv(comm, std::span{x}, comm.rank() == 0 ? 1 : 0);
      FAIL("the receive should fail");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::peer_lost);
      if (comm.rank() == 2) third = e.what();
    }
  });
  CHECK(third.starts_with("rank 2: lost rank 1: it closed its communicator while rank 0 still had a message from it (reported by rank 0)"));
}

TEST_CASE("a rank that dies is reported as lost, naming it") {
  const std::string name = fresh_name();
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      coll::shm t(1, 2, name, small_fifos());
      ::kill(::getpid(), SIGKILL);  // no goodbye
    } catch (...) {
    }
    ::_exit(3);
  }
  REQUIRE(child > 0);
  coll::shm t(0, 2, name, small_fifos());
  std::vector<int> x(4);
  auto r = t.post_recv(1, {5, 0}, in_bytes(x));
  const auto started = coll::clock::now();
  try {
    wait_all(t, {r}, 10s);
    FAIL("the receive should fail");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::peer_lost);
    CHECK(std::string(e.what()).find("lost rank 1: its process (pid " + std::to_string(child) + ") died") != std::string::npos);
  }
  CHECK(coll::clock::now() - started < 1s);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK_FALSE(in_dev_shm(name));
}

TEST_CASE("a receive with no sender fails at its deadline") {
  run_shm_ranks(
      2,
      [](auto& comm) {
        std::vector<int> x(4);
        if (comm.rank() == 0) {
          const auto started = coll::clock::now();
          CHECK(code_of([&] { coll::broadcast(comm, std::span{x}, 1); }) == coll::errc::timeout);
          CHECK(coll::clock::now() - started < 3s);
        } else {
          std::this_thread::sleep_for(800ms);  // rank 1 never calls; it leaves after rank 0 gave up
        }
      },
      {}, 300ms);
}

TEST_CASE("start-up fails at its deadline naming the missing rank, and leaves nothing behind") {
  coll::shm_options o;
  o.startup_timeout = 300ms;
  const std::string name = fresh_name();
  std::vector<coll::errc> codes(2);
  std::vector<std::string> messages(2);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 2; ++r)  // rank 2 of 3 never comes
      ranks.emplace_back([&, r] {
        try {
          coll::shm t(r, 3, name, o);
        } catch (const coll::error& e) {
          codes[std::size_t(r)] = coll::errc(e.code().value());
          messages[std::size_t(r)] = e.what();
        }
      });
  }
  for (int r = 0; r < 2; ++r) {
    CHECK(codes[std::size_t(r)] == coll::errc::timeout);
    CHECK(messages[std::size_t(r)].find("rank(s) 2 never mapped") != std::string::npos);
  }
  CHECK_FALSE(in_dev_shm(name));
}

TEST_CASE("a dead job's leftover segment is replaced") {
  const std::string name = fresh_name();
  {  // what a job whose rank 0 died mid-start-up leaves: an unreadable file
    const int fd = ::open(("/dev/shm/" + name).c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, 4096) == 0);
    ::close(fd);
  }
  coll::shm_options o;
  o.startup_timeout = 5s;
  run_shm_ranks(
      2,
      [](auto& comm) {
        int x = comm.rank() + 1;
        CHECK(coll::all_reduce(comm, x, coll::sum{}) == 3);
      },
      o, 20s, name);
}

TEST_CASE("ranks that disagree on the FIFO geometry get a clear error") {
  const std::string name = fresh_name();
  std::string message;
  std::jthread rank0([&] {
    coll::shm_options o;
    o.startup_timeout = 1s;
    try {
      coll::shm t(0, 2, name, o);
    } catch (const coll::error&) {
    }
  });
  std::this_thread::sleep_for(100ms);
  try {
    coll::shm_options o = small_fifos();
    o.startup_timeout = 800ms;
    coll::shm t(1, 2, name, o);
  } catch (const coll::error& e) {
    message = e.what();
  }
  rank0.join();
  CHECK(message.find("do COLLECTIVES_SHM_* and WORLD_SIZE agree on every rank?") != std::string::npos);
  CHECK_FALSE(in_dev_shm(name));
}

TEST_CASE("join needs every rank of the job on this host") {
  coll::bootstrap::launch_info two_hosts;
  two_hosts.size = 4;
  two_hosts.local_size = 2;
  two_hosts.origin = "torchrun-style environment";
  try {
    (void)coll::shm::join(two_hosts, coll::auth::job_token("t"));
    FAIL("join should refuse");
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    CHECK(std::string(e.what()).find("puts 2 of the job's 4 ranks on this host") != std::string::npos);
  }
}

TEST_CASE("segment names carry the token and the launch, and count communicators") {
  coll::bootstrap::launch_info a;
  a.size = a.local_size = 2;
  a.master_addr = "127.0.0.1";
  a.master_port = 1000;
  auto b = a;
  b.master_port = 1001;
  const coll::auth::job_token t1("one"), t2("two");
  const std::string first = coll::shm::segment_name(a, t1), second = coll::shm::segment_name(a, t1);
  CHECK(first.starts_with(coll::shm_detail::segment_prefix("one")));
  CHECK(first != second);  // the next communicator of the same job
  CHECK(first.substr(0, first.size() - 2) == second.substr(0, second.size() - 2));
  CHECK_FALSE(coll::shm::segment_name(b, t1).starts_with(first.substr(0, first.size() - 2)));
  CHECK_FALSE(coll::shm::segment_name(a, t2).starts_with(coll::shm_detail::segment_prefix("one")));
}
