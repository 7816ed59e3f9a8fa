// Groups (comm.split, comm.split_by_host): each group's collectives against the
// serial reference over its own members in its own order, for several ways of
// splitting, every algorithm, built-in and user ops; nested splits; calls of a group
// and of its parent interleaved, blocking and not; ranks left out; one host.
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <thread>
#include <type_traits>

#include <collectives/split.hpp>

#include "harness.hpp"

using namespace testing;

namespace {

// A way to split P ranks: a color and a key for each rank.
struct splitting {
  const char* name;
  std::function<int(int rank, int p)> color;
  std::function<int(int rank, int p)> key;
};

const std::vector<splitting> splittings{
    {"halves by parity", [](int r, int) { return r % 2; }, [](int r, int) { return r; }},
    {"thirds, reversed", [](int r, int) { return r % 3; }, [](int r, int) { return -r; }},
    {"everyone, keys tied", [](int, int) { return 7; }, [](int, int) { return 0; }},
    {"everyone, rotated by one", [](int, int) { return 0; }, [](int r, int p) { return (r + 1) % p; }},
    {"each rank alone", [](int r, int) { return r; }, [](int, int) { return 0; }},
};

// The one whose groups run the large case too: groups of different sizes, in reverse.
constexpr std::string_view large_case_splitting = "thirds, reversed";

// The serial rule (MPI_Comm_split's): the ranks of my color, by key, then by rank.
std::vector<int> members_of(const splitting& s, int p, int me) {
  std::vector<int> m;
  for (int q = 0; q < p; ++q)
    if (s.color(q, p) == s.color(me, p)) m.push_back(q);
  std::stable_sort(m.begin(), m.end(), [&](int a, int b) { return s.key(a, p) < s.key(b, p); });
  return m;
}

template <class T, class Op>
std::vector<T> reduced_over(const std::vector<int>& members, std::size_t n) {
  std::vector<std::vector<T>> given;
  for (int q : members) given.push_back(inputs<T, Op>(q, n));
  return reduced<T, Op>(given);
}

std::vector<int> all_ranks(int p) {
  std::vector<int> r(static_cast<std::size_t>(p));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

std::string where(const splitting& s, std::size_t n) { return std::string(s.name) + ", n=" + std::to_string(n) + ": "; }

// The group as the serial rule has it, or what differs.
template <class Group>
std::string check_shape(const Group& g, const std::vector<int>& members, int me) {
  const int want_rank = int(std::find(members.begin(), members.end(), me) - members.begin());
  if (g.size() != int(members.size()))
    return "group of " + std::to_string(g.size()) + " ranks, want " + std::to_string(members.size());
  if (g.rank() != want_rank) return "group rank " + std::to_string(g.rank()) + ", want " + std::to_string(want_rank);
  for (int r = 0; r < g.size(); ++r)
    if (g.transport().job_rank(r) != members[std::size_t(r)]) return "group rank " + std::to_string(r) + " maps to another rank";
  return {};
}

template <class T, class Op>
void check_all_reduce_in_groups() {
  for (int p : rank_counts)
    for (const auto& s : splittings)
      on_ranks(p, [&](comm& c) -> std::string {
        auto g = c.split(s.color(c.rank(), p), s.key(c.rank(), p));
        if (!g) return "no group";
        const auto members = members_of(s, p, c.rank());
        if (auto m = check_shape(*g, members, c.rank()); !m.empty()) return s.name + std::string(": ") + m;
        std::string problem;
        for (std::size_t n : element_counts(p)) {
          // The large case in one way of splitting: a group's calls differ from the job's
          // by their members and order, which every count checks; what the large case
          // adds (slices, the workspace, pieces) is the same code for any group.
          if (n == large_count && s.name != large_case_splitting) continue;
          const auto want = reduced_over<T, Op>(members, n);
          each_algorithm<coll::kind::all_reduce>([&]<class A>() {
            if (!problem.empty()) return;
            if constexpr (A::preserves_rank_order || coll::is_commutative_v<Op>) {
              std::vector<T> data = inputs<T, Op>(c.rank(), n);
              coll::all_reduce<A>(*g, data, Op{});
              problem = mismatch<T>(data, want, where(s, n) + A::name);
            }
          });
        }
        return problem;
      });
}

}  // namespace

// In three cases, which a sanitized build runs side by side (tests/CMakeLists.txt).
TEST_CASE("split: each group's all_reduce matches the serial reduction over its members, in group order (integers)") {
  check_all_reduce_in_groups<std::int64_t, coll::sum>();
  check_all_reduce_in_groups<std::int32_t, coll::bit_xor>();
}

TEST_CASE("split: each group's all_reduce matches the serial reduction over its members, in group order (floating point)") {
  check_all_reduce_in_groups<float, coll::max>();
  check_all_reduce_in_groups<double, coll::avg>();
}

TEST_CASE("split: each group's all_reduce matches the serial reduction over its members, in group order (user ops)") {
  check_all_reduce_in_groups<mat2, mat_mul>();     // a user op, applied in the group's order
  check_all_reduce_in_groups<scored, arg_max>();   // a user op on a user struct
}

TEST_CASE("split: all_gather, broadcast and reduce_scatter in groups put each part where the group's order says") {
  for (int p : rank_counts)
    for (const auto& s : splittings)
      on_ranks(p, [&](comm& c) -> std::string {
        auto g = c.split(s.color(c.rank(), p), s.key(c.rank(), p));
        const auto members = members_of(s, p, c.rank());
        const std::size_t n = 5;
        // all_gather: part r is group rank r's input, the input of job rank members[r].
        std::vector<std::int64_t> all(n * members.size()), want;
        for (int q : members) {
          const auto in = inputs<std::int64_t, coll::sum>(q, n);
          want.insert(want.end(), in.begin(), in.end());
        }
        coll::all_gather(*g, inputs<std::int64_t, coll::sum>(c.rank(), n), all);
        if (auto m = mismatch<std::int64_t>(all, want, where(s, n) + "all_gather"); !m.empty()) return m;
        // broadcast from the group's last rank.
        const int root = g->size() - 1;
        std::vector<std::int64_t> b = g->rank() == root ? inputs<std::int64_t, coll::sum>(100, 7) : std::vector<std::int64_t>(7);
        coll::broadcast(*g, b, root);
        if (auto m = mismatch<std::int64_t>(b, inputs<std::int64_t, coll::sum>(100, 7), where(s, 7) + "broadcast"); !m.empty())
          return m;
        // reduce_scatter: group rank r keeps part r of the members' sum.
        const std::size_t part = 3, total = part * members.size();
        std::vector<std::int64_t> out(part);
        coll::reduce_scatter(*g, inputs<std::int64_t, coll::sum>(c.rank(), total), out, coll::sum{});
        const auto sum = reduced_over<std::int64_t, coll::sum>(members, total);
        const auto mine = std::span(sum).subspan(std::size_t(g->rank()) * part, part);
        return mismatch<std::int64_t>(out, mine, where(s, total) + "reduce_scatter");
      });
}

TEST_CASE("split: groups of groups, with the parent's calls between the groups' calls") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      auto half = c.split(c.rank() % 2, c.rank());  // even and odd ranks
      if (!half) return "no half";
      auto quarter = half->split(half->rank() / 2, -half->rank());  // pairs of the half, reversed
      if (!quarter) return "no quarter";
      std::vector<int> halves, pair;  // job ranks, in the order the rule gives
      for (int q = c.rank() % 2; q < p; q += 2) halves.push_back(q);
      for (int h = int(halves.size()) - 1; h >= 0; --h)
        if (h / 2 == half->rank() / 2) pair.push_back(halves[std::size_t(h)]);
      if (auto m = check_shape(*quarter, pair, c.rank()); !m.empty()) return "quarter: " + m;
      for (int round = 0; round < 3; ++round) {
        const std::size_t n = 33 + std::size_t(round);
        std::vector<std::int64_t> q = inputs<std::int64_t, coll::sum>(c.rank(), n);
        std::vector<std::int64_t> h = q, w = q;
        coll::all_reduce(*quarter, q, coll::sum{});
        coll::all_reduce(c, w, coll::sum{});
        coll::all_reduce<coll::ring>(*half, h, coll::sum{});
        const auto everyone = all_ranks(p);
        if (auto m = mismatch<std::int64_t>(q, reduced_over<std::int64_t, coll::sum>(pair, n), "quarter"); !m.empty()) return m;
        if (auto m = mismatch<std::int64_t>(h, reduced_over<std::int64_t, coll::sum>(halves, n), "half"); !m.empty()) return m;
        if (auto m = mismatch<std::int64_t>(w, reduced_over<std::int64_t, coll::sum>(everyone, n), "job"); !m.empty()) return m;
      }
      // Two splits of one communicator live side by side, with overlapping members.
      auto again = c.split(0, c.rank());
      std::vector<std::int64_t> x{c.rank()}, y{1};
      coll::all_reduce(*again, x, coll::sum{});
      coll::all_reduce(*half, y, coll::sum{});
      if (x[0] != std::int64_t(p) * (p - 1) / 2) return "the second split's sum is " + std::to_string(x[0]);
      if (y[0] != std::int64_t(halves.size())) return "the half's count is " + std::to_string(y[0]);
      return {};
    });
}

TEST_CASE("split: a negative color gets no communicator, and the others' groups work without it") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      const bool out = c.rank() % 3 == 1;
      auto g = c.split(out ? -1 : 0, 0);
      if (out) return g ? "a rank with a negative color got a group" : "";
      if (!g) return "no group";
      std::vector<std::int64_t> v{c.rank()};
      coll::all_reduce(*g, v, coll::sum{});
      std::int64_t want = 0;
      for (int q = 0; q < p; ++q)
        if (q % 3 != 1) want += q;
      return v[0] == want ? "" : "sum " + std::to_string(v[0]) + ", want " + std::to_string(want);
    });
}

// Each handle's wait advances the calls of both communicators, whose messages wake
// the one transport they share: a wake-up taken by one must not be lost to the other.
TEST_CASE("split: non-blocking calls of a group and of its parent in flight together") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = c.split(c.rank() % 2, c.rank());
      std::vector<int> members;
      for (int q = c.rank() % 2; q < p; q += 2) members.push_back(q);
      const auto everyone = all_ranks(p);
      const std::size_t n = 10'000;
      for (int round = 0; round < 8; ++round) {
        auto a = inputs<std::int64_t, coll::sum>(c.rank() + round, n), b = a, d = a;
        auto in_group = coll::iall_reduce(*g, a, coll::sum{});
        auto in_job = coll::iall_reduce(c, b, coll::sum{});
        if (round % 2) coll::all_reduce(*g, d, coll::sum{});  // blocking, while both are in flight
        if (round % 4 < 2) {
          in_job.wait();
          in_group.wait();
        } else {
          in_group.wait();
          in_job.wait();
        }
        std::vector<int> shifted = members, all = everyone;
        for (int& q : shifted) q += round;
        for (int& q : all) q += round;
        const auto in_group_sum = reduced_over<std::int64_t, coll::sum>(shifted, n);
        if (auto m = mismatch<std::int64_t>(a, in_group_sum, "group"); !m.empty()) return m;
        if (round % 2)
          if (auto m = mismatch<std::int64_t>(d, in_group_sum, "group, blocking"); !m.empty()) return m;
        if (auto m = mismatch<std::int64_t>(b, reduced_over<std::int64_t, coll::sum>(all, n), "job"); !m.empty()) return m;
      }
      return {};
    });
}

TEST_CASE("split: one progress thread serves the job's communicator and its groups") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = c.split(0, c.rank());
      g->start_progress_thread();
      if (!c.has_progress_thread()) return "the job's communicator does not see its group's progress thread";
      const std::size_t n = 4'000;
      auto a = inputs<std::int64_t, coll::sum>(c.rank(), n), b = a;
      auto in_group = coll::iall_reduce(*g, a, coll::sum{});
      auto in_job = coll::iall_reduce(c, b, coll::sum{});
      in_group.wait();
      in_job.wait();
      g->stop_progress_thread();
      const auto everyone = all_ranks(p);
      const auto want = reduced_over<std::int64_t, coll::sum>(everyone, n);
      if (auto m = mismatch<std::int64_t>(a, want, "group"); !m.empty()) return m;
      return mismatch<std::int64_t>(b, want, "job");
    });
}

TEST_CASE("split_by_host: the ranks of this job share one host, in rank order") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      auto host = c.split_by_host();
      if (host.size() != p || host.rank() != c.rank()) return "not one group of every rank in rank order";
      std::vector<std::int64_t> v{1};
      coll::all_reduce(host, v, coll::sum{});
      return v[0] == p ? "" : "sum " + std::to_string(v[0]);
    });
}

TEST_CASE("split: a group outlives the group it was split from") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      auto child = std::make_optional(*c.split(0, c.rank()));
      auto grandchild = child->split(0, -child->rank());
      child.reset();
      std::vector<std::int64_t> v{grandchild->rank()};
      coll::all_reduce(*grandchild, v, coll::sum{});
      return v[0] == std::int64_t(p) * (p - 1) / 2 ? "" : "sum " + std::to_string(v[0]);
    });
}

TEST_CASE("split: a group's timeout names the group's call, and the job goes on") {
  if (ranks_are_processes()) return;  // a lost call's messages stay behind in the job's links
  for (int p : rank_counts) {
    if (p < 2) continue;
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = c.split(0, c.rank());
      if (g->rank() == 0) {
        g->set_timeout(std::chrono::milliseconds(200));
        std::vector<int> v(3);
        try {
          coll::all_reduce(*g, v, coll::sum{});
          return "a group call that its peers never made finished";
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::timeout) return std::string("not a timeout: ") + e.what();
          if (std::string(e.what()).find("all_reduce") == std::string::npos) return std::string("unnamed call: ") + e.what();
        }
      }
      std::vector<std::int64_t> v{1};
      coll::all_reduce(c, v, coll::sum{});
      return v[0] == p ? "" : "the job's sum after the group's timeout is " + std::to_string(v[0]);
    });
  }
}

TEST_CASE("split: a rank that never calls it is named, in the words of the call the others made") {
  if (ranks_are_processes()) return;  // the others' messages stay behind in the job's links
  for (int p : rank_counts) {
    if (p < 2) continue;
    on_ranks(p, [&](comm& c) -> std::string {
      if (c.rank() == p - 1) {  // never calls split, and stays until the others have given up
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        return "";
      }
      c.set_timeout(std::chrono::milliseconds(200));
      try {
        c.split(0, c.rank());
        return "a split that a rank never made finished";
      } catch (const coll::error& e) {
        const std::string expected = "split: timed out after 200 ms on rank " + std::to_string(c.rank()) +
                                     " forming the groups: rank(s) " + std::to_string(p - 1) +
                                     " had not made the call within the timeout";
        if (e.code() != coll::errc::timeout || !std::string(e.what()).starts_with(expected))
          return std::string("expected \"") + expected + "\", got \"" + e.what() + "\"";
      }
      return "";
    });
  }
}
