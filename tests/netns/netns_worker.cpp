// One rank of a multi-host test job (tests/netns/run.sh starts one per network
// namespace under collectives-run): runs the collectives over the TCP transport and
// checks every result exactly against a serial reference that each rank computes on
// its own from the same deterministic inputs. Built as netns_worker_rdma (with
// NETNS_WORKER_OVER_RDMA), it runs over automatic_transport with rdma plugged in, so
// that COLLECTIVES_TRANSPORT=rdma moves the same checks onto libfabric.
//
//   netns_worker [--max-elements N] [--all-ops-max N] [--loop]
//
// Normal mode: all_reduce, reduce, reduce_scatter, all_gather, broadcast and
// all_to_all on int32 and float, at sizes from 0 up to --max-elements elements
// (default 1048576), with every built-in op (sum, prod, min, max, avg, and the bit
// ops on int) at sizes up to --all-ops-max and sum at every size, through the
// automatic choice and each algorithm explicitly. The inputs are small integers
// (sum, prod, avg) or arbitrary values (min, max, bit ops), so every result is exact
// in any order of reduction and is compared bit for bit.
//
// --loop: all_reduce 64 Ki ints again and again (rank 0 decides when to stop, after
// 120 s) and print "ready pid=PID" once the first call has succeeded, so that the
// script can kill a rank or take a link down under a running job.
//
// Exit status: 0 all results right; 1 a wrong result; 2 bad arguments; 3 the library
// threw collectives::error (timeout, peer lost, ...); 4 any other exception.

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <collectives/collectives.hpp>
#ifdef NETNS_WORKER_OVER_RDMA
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/rdma.hpp>  // offers rdma to automatic_transport
#else
#include <collectives/transport/tcp.hpp>
#endif

namespace coll = collectives;
#ifdef NETNS_WORKER_OVER_RDMA
// netns_worker_rdma: COLLECTIVES_TRANSPORT (rdma in run.sh's rdma cases) picks.
using comm_t = coll::communicator<coll::automatic_transport>;
#else
using comm_t = coll::communicator<coll::tcp>;
#endif
using clock_type = std::chrono::steady_clock;

namespace {

struct wrong_result : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What kind of values an op gets, so that its result is exact whatever the order.
enum class values { small, factors, any, bits };

template <class T>
T value(values kind, std::uint64_t salt, int rank, std::size_t i) {
  const std::uint64_t h = mix(mix(salt) ^ (std::uint64_t(rank) << 48) ^ i);
  switch (kind) {
    case values::small: return T(int(h % 101) - 50);
    case values::factors: {
      static constexpr int f[] = {1, -1, 2, -2, 1, -1, 0, 1};  // products of 4 stay tiny
      return T(f[h % 8]);
    }
    case values::any:
      if constexpr (std::is_floating_point_v<T>)
        return T(double(std::int64_t(h % 2000001) - 1000000) / 8.0);  // fractions, both signs
      else
        return T(std::uint32_t(h));
    case values::bits: return T(std::uint32_t(h));
  }
  return T{};
}

template <class T>
const char* type_name() {
  return std::is_floating_point_v<T> ? "float" : "int32";
}

template <class T>
std::string show(T v) {
  std::ostringstream s;
  s << std::setprecision(9) << v;
  return s.str();
}

class checker {
 public:
  checker(comm_t& comm, std::size_t max_elements, std::size_t all_ops_max)
      : comm_(comm), p_(comm.size()), me_(comm.rank()), max_(max_elements), all_ops_max_(all_ops_max) {}

  long checks() const { return checks_; }
  double bytes() const { return bytes_; }

  void run_all() {
    static constexpr std::size_t sizes[] = {0, 1, 2, 3, 5, 17, 255, 1000, 4099, 65537, 262147, 1048576, 4194304};
    for (std::size_t n : sizes) {
      if (n > max_) break;
      const bool all_ops = n <= all_ops_max_;
      one_size<std::int32_t>(n, all_ops);
      one_size<float>(n, all_ops);
    }
    coll::barrier(comm_);
  }

  // The groups of a multi-host job: the ranks of each host (split_by_host), and the
  // ranks with the same place on every host, each group's sum against the reference.
  // Returns "H hosts of K ranks".
  std::string groups() {
    auto host = comm_.split_by_host();
    auto across = comm_.split(host.rank(), me_);
    const int hosts = coll::all_reduce(comm_, host.rank() == 0 ? 1 : 0, coll::sum{});
    if (across->size() != hosts) throw wrong_result("the group across hosts has " + std::to_string(across->size()) +
                                                    " ranks, but there are " + std::to_string(hosts) + " hosts");
    for (auto* group : {&host, &*across}) {
      std::int64_t want = 0;
      for (int r = 0; r < group->size(); ++r) want += group->transport().job_rank(r);
      if (const auto got = coll::all_reduce(*group, std::int64_t(me_), coll::sum{}); got != want)
        throw wrong_result("a group's sum of its ranks is " + std::to_string(got) + ", want " + std::to_string(want));
    }
    checks_ += 2;
    return std::to_string(hosts) + " hosts of " + std::to_string(host.size()) + " ranks";
  }

  // --loop: the same all_reduce until rank 0 says stop.
  void loop() {
    const auto stop_at = clock_type::now() + std::chrono::seconds(120);
    for (long round = 0;; ++round) {
      all_reduce_case<coll::automatic, std::int32_t>(65536, coll::sum{}, values::small, "loop");
      if (round == 0) std::cout << "ready pid=" << ::getpid() << std::endl;
      int go = me_ == 0 && clock_type::now() < stop_at ? 1 : 0;
      coll::broadcast(comm_, std::span<int>(&go, 1), 0);
      if (!go) return;
    }
  }

 private:
  template <class T>
  void one_size(std::size_t n, bool all_ops) {
    all_reduce_case<coll::automatic, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::ring, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::double_binary_tree, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::direct, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::halving_doubling, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::hierarchical<>, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_case<coll::hierarchical<coll::direct, coll::halving_doubling>, T>(n, coll::sum{}, values::small, "sum");
    all_reduce_in_place<T>(n);
    if (all_ops) {
      all_reduce_case<coll::automatic, T>(n, coll::prod{}, values::factors, "prod");
      all_reduce_case<coll::automatic, T>(n, coll::min{}, values::any, "min");
      all_reduce_case<coll::automatic, T>(n, coll::max{}, values::any, "max");
      all_reduce_case<coll::automatic, T>(n, coll::avg{}, values::small, "avg");
      all_reduce_case<coll::hierarchical<>, T>(n, coll::avg{}, values::small, "avg");
      if constexpr (std::is_integral_v<T>) {
        all_reduce_case<coll::automatic, T>(n, coll::bit_and{}, values::bits, "bit_and");
        all_reduce_case<coll::automatic, T>(n, coll::bit_or{}, values::bits, "bit_or");
        all_reduce_case<coll::automatic, T>(n, coll::bit_xor{}, values::bits, "bit_xor");
      }
    }

    const std::size_t m = (n + std::size_t(p_) - 1) / std::size_t(p_);  // a part of a sharded call
    reduce_scatter_case<coll::automatic, T>(m, coll::sum{}, values::small, "sum");
    reduce_scatter_case<coll::ring, T>(m, coll::sum{}, values::small, "sum");
    reduce_scatter_case<coll::direct, T>(m, coll::sum{}, values::small, "sum");
    if (all_ops) {
      reduce_scatter_case<coll::automatic, T>(m, coll::prod{}, values::factors, "prod");
      reduce_scatter_case<coll::automatic, T>(m, coll::min{}, values::any, "min");
      reduce_scatter_case<coll::automatic, T>(m, coll::max{}, values::any, "max");
      reduce_scatter_case<coll::automatic, T>(m, coll::avg{}, values::small, "avg");
      if constexpr (std::is_integral_v<T>) reduce_scatter_case<coll::automatic, T>(m, coll::bit_xor{}, values::bits, "bit_xor");
    }

    reduce_case<coll::automatic, T>(n, coll::sum{}, values::small, "sum");
    reduce_case<coll::ring, T>(n, coll::max{}, values::any, "max");
    reduce_case<coll::double_binary_tree, T>(n, coll::min{}, values::any, "min");

    all_gather_case<coll::automatic, T>(m);
    all_gather_case<coll::ring, T>(m);
    all_gather_case<coll::direct, T>(m);

    broadcast_case<coll::automatic, T>(n);
    broadcast_case<coll::ring, T>(n);
    broadcast_case<coll::double_binary_tree, T>(n);
    broadcast_case<coll::direct, T>(n);

    all_to_all_case<coll::automatic, T>(m);
  }

  // A fresh salt per call, the same on every rank (all ranks make the same calls).
  std::uint64_t next_salt() { return ++calls_; }
  int next_root() { return int(calls_ % std::uint64_t(p_)); }

  template <class T, class Op>
  std::vector<T> reference(values kind, std::uint64_t salt, std::size_t offset, std::size_t count, Op op) const {
    std::vector<T> want(count);
    for (std::size_t i = 0; i < count; ++i) {
      T acc = value<T>(kind, salt, 0, offset + i);
      for (int r = 1; r < p_; ++r) acc = op(acc, value<T>(kind, salt, r, offset + i));
      if constexpr (requires { op.finalize(acc, p_); }) acc = op.finalize(acc, p_);
      want[i] = acc;
    }
    return want;
  }

  template <class T>
  std::vector<T> inputs(values kind, std::uint64_t salt, int rank, std::size_t count) const {
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = value<T>(kind, salt, rank, i);
    return v;
  }

  template <class T>
  void expect(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    ++checks_;
    bytes_ += double(got.size() * sizeof(T));
    if (got.size() == want.size() && (got.empty() || std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0))
      return;
    std::size_t i = 0;
    while (i < got.size() && i < want.size() && std::memcmp(&got[i], &want[i], sizeof(T)) == 0) ++i;
    std::ostringstream s;
    s << "rank " << me_ << ": " << what << " (" << type_name<T>() << "): ";
    if (got.size() != want.size())
      s << got.size() << " elements, expected " << want.size();
    else
      s << "element " << i << " of " << got.size() << " is " << show(got[i]) << ", the serial reference is "
        << show(want[i]);
    throw wrong_result(s.str());
  }

  template <class A, class T, class Op>
  void all_reduce_case(std::size_t n, Op op, values kind, const char* op_name) {
    const auto salt = next_salt();
    const auto in = inputs<T>(kind, salt, me_, n);
    std::vector<T> out(n, T(7));
    coll::all_reduce<A>(comm_, in, out, op);
    expect(out, reference<T>(kind, salt, 0, n, op), std::string("all_reduce<") + A::name + "> " + op_name + " n=" + std::to_string(n));
  }

  template <class T>
  void all_reduce_in_place(std::size_t n) {
    const auto salt = next_salt();
    auto data = inputs<T>(values::small, salt, me_, n);
    coll::all_reduce(comm_, data, coll::sum{});
    expect(data, reference<T>(values::small, salt, 0, n, coll::sum{}), "all_reduce in place sum n=" + std::to_string(n));
  }

  template <class A, class T, class Op>
  void reduce_scatter_case(std::size_t m, Op op, values kind, const char* op_name) {
    const auto salt = next_salt();
    const auto in = inputs<T>(kind, salt, me_, m * std::size_t(p_));
    std::vector<T> out(m, T(7));
    coll::reduce_scatter<A>(comm_, in, out, op);
    expect(out, reference<T>(kind, salt, std::size_t(me_) * m, m, op),
           std::string("reduce_scatter<") + A::name + "> " + op_name + " part=" + std::to_string(m));
  }

  template <class A, class T, class Op>
  void reduce_case(std::size_t n, Op op, values kind, const char* op_name) {
    const auto salt = next_salt();
    const int root = next_root();
    const auto in = inputs<T>(kind, salt, me_, n);
    std::vector<T> out(me_ == root ? n : 0, T(7));
    coll::reduce<A>(comm_, in, out, op, root);
    if (me_ == root)
      expect(out, reference<T>(kind, salt, 0, n, op),
             std::string("reduce<") + A::name + "> " + op_name + " root=" + std::to_string(root) + " n=" + std::to_string(n));
  }

  template <class A, class T>
  void all_gather_case(std::size_t m) {
    const auto salt = next_salt();
    const auto in = inputs<T>(values::any, salt, me_, m);
    std::vector<T> out(m * std::size_t(p_), T(7)), want;
    coll::all_gather<A>(comm_, in, out);
    for (int r = 0; r < p_; ++r) {
      const auto part = inputs<T>(values::any, salt, r, m);
      want.insert(want.end(), part.begin(), part.end());
    }
    expect(out, want, std::string("all_gather<") + A::name + "> part=" + std::to_string(m));
  }

  template <class A, class T>
  void broadcast_case(std::size_t n) {
    const auto salt = next_salt();
    const int root = next_root();
    auto data = me_ == root ? inputs<T>(values::any, salt, root, n) : std::vector<T>(n, T(7));
    coll::broadcast<A>(comm_, data, root);
    expect(data, inputs<T>(values::any, salt, root, n),
           std::string("broadcast<") + A::name + "> root=" + std::to_string(root) + " n=" + std::to_string(n));
  }

  template <class A, class T>
  void all_to_all_case(std::size_t m) {
    const auto salt = next_salt();
    const auto in = inputs<T>(values::any, salt, me_, m * std::size_t(p_));
    std::vector<T> out(m * std::size_t(p_), T(7)), want(m * std::size_t(p_));
    coll::all_to_all<A>(comm_, in, out);
    for (int r = 0; r < p_; ++r) {  // part r comes from rank r: its part number me_
      const auto theirs = inputs<T>(values::any, salt, r, m * std::size_t(p_));
      for (std::size_t k = 0; k < m; ++k) want[std::size_t(r) * m + k] = theirs[std::size_t(me_) * m + k];
    }
    expect(out, want, std::string("all_to_all<") + A::name + "> part=" + std::to_string(m));
  }

  comm_t& comm_;
  int p_, me_;
  std::size_t max_, all_ops_max_;
  std::uint64_t calls_ = 0;
  long checks_ = 0;
  double bytes_ = 0;
};

bool parse_size(const char* text, std::size_t& into) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') return false;
  into = std::size_t(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t max_elements = 1048576, all_ops_max = SIZE_MAX;
  bool loop = false;
  for (int a = 1; a < argc; ++a) {
    const std::string_view arg = argv[a];
    if (arg == "--loop") {
      loop = true;
    } else if ((arg == "--max-elements" || arg == "--all-ops-max") && a + 1 < argc) {
      if (!parse_size(argv[++a], arg == "--max-elements" ? max_elements : all_ops_max)) {
        std::cerr << "netns_worker: " << arg << " needs a number\n";
        return 2;
      }
    } else {
      std::cerr << "usage: netns_worker [--max-elements N] [--all-ops-max N] [--loop]\n";
      return 2;
    }
  }

  int rank = -1;
  try {
    const auto start = clock_type::now();
    auto comm = comm_t::from_env();
    rank = comm.rank();
    checker check(comm, max_elements, all_ops_max);
    if (loop) {
      check.loop();
      std::cout << "loop ended without an error\n";
      return 0;
    }
    check.run_all();
    const std::string layout = check.groups();
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    std::cout << "ok: rank " << rank << " of " << comm.size() << ": " << check.checks() << " results exact ("
              << std::fixed << std::setprecision(1) << check.bytes() / 1048576.0 << " MiB checked) in "
              << std::setprecision(2) << seconds << " s on " << layout << std::endl;
    return 0;
  } catch (const wrong_result& e) {
    std::cerr << "WRONG RESULT: " << e.what() << std::endl;
    return 1;
  } catch (const coll::error& e) {
    std::cerr << "collectives error (rank " << rank << ", " << e.code().message() << "): " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "error (rank " << rank << "): " << e.what() << std::endl;
    return 4;
  }
}
