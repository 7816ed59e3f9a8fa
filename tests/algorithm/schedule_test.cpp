// Schedules tested as data, with no transport: messages pair up, no two operations
// race on memory, a serial simulation (rendezvous messages) completes without
// deadlock, every reduced element holds each rank's part exactly once (and, for
// direct all_reduce, in the documented grouping), and step counts match the textbook.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <collectives/algorithm/automatic.hpp>
#include <collectives/algorithm/halving_doubling.hpp>
#include <collectives/algorithm/hierarchical.hpp>
#include <collectives/error.hpp>
#include <collectives/runtime/compact_plan.hpp>
#include <collectives/runtime/plan_cache.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using coll::buffer_id;
using coll::op_kind;
using coll::region;
using coll::schedule;

namespace {

// Everything needed to plan one collective on every rank.
struct grid_point {
  int size;
  std::size_t count = 0;
  int root = 0;
  std::vector<std::size_t> counts{};                    // v-forms
  std::vector<std::vector<std::size_t>> sends_of{}, receives_of{};  // all_to_allv, per rank
};

template <class A, class Kind>
std::vector<schedule> plan_all(const grid_point& g, std::size_t slice_bytes) {
  std::vector<schedule> out;
  for (int r = 0; r < g.size; ++r) {
    coll::plan_request req{.rank = r, .size = g.size, .count = g.count, .root = g.root, .counts = g.counts,
                           .element_size = 4, .finalize = true, .slice_bytes = slice_bytes};
    if (!g.sends_of.empty()) {
      req.counts = g.sends_of[std::size_t(r)];
      req.recv_counts = g.receives_of[std::size_t(r)];
    }
    out.push_back(coll::plan_of<A>(Kind{}, req));
  }
  return out;
}

// ---- messages pair up ----------------------------------------------------------

using message = std::tuple<int, int, std::uint32_t, std::size_t>;  // from, to, tag, elements

std::string unmatched_messages(const std::vector<schedule>& plans) {
  std::multiset<message> sent, received;
  for (int r = 0; r < int(plans.size()); ++r)
    for (const auto& op : plans[std::size_t(r)].ops) {
      if (op.kind == op_kind::send) sent.insert({r, op.peer, op.tag, op.src.count});
      if (op.kind == op_kind::recv || op.kind == op_kind::recv_reduce) received.insert({op.peer, r, op.tag, op.dst.count});
    }
  if (sent == received) return {};
  for (const auto& m : sent)
    if (sent.count(m) != received.count(m))
      return "message " + std::to_string(std::get<0>(m)) + "->" + std::to_string(std::get<1>(m)) + " tag " +
             std::to_string(std::get<2>(m)) + " sent " + std::to_string(sent.count(m)) + "x, received " +
             std::to_string(received.count(m)) + "x";
  return "a receive has no matching send";
}

// ---- no races ------------------------------------------------------------------

// How the caller's input sits in its output for an in-place call: input element i
// is output element i + shift (negative: output element i is input element i - shift).
struct aliasing {
  bool in_place = false;
  std::ptrdiff_t shift = 0;
};

struct access {
  int space;  // 0: output (and in-place input), 1: input, 2: scratch, 3: staging
  std::ptrdiff_t begin, end;
  bool writes;
};

access touch(region r, bool writes, aliasing a) {
  auto b = std::ptrdiff_t(r.offset), e = std::ptrdiff_t(r.offset + r.count);
  switch (r.buffer) {
    case buffer_id::output: return {0, b, e, writes};
    case buffer_id::input: return a.in_place ? access{0, b + a.shift, e + a.shift, writes} : access{1, b, e, writes};
    case buffer_id::scratch: return {2, b, e, writes};
    case buffer_id::staging: return {3, b, e, writes};
  }
  return {};
}

std::vector<access> accesses(const coll::operation& op, aliasing a) {
  switch (op.kind) {
    case op_kind::send: return {touch(op.src, false, a)};
    case op_kind::recv: return {touch(op.dst, true, a)};
    case op_kind::recv_reduce:
      if (op.base.count == 0) return {touch(op.dst, true, a), touch(op.src, true, a)};
      return {touch(op.dst, true, a), touch(op.src, true, a), touch(op.base, false, a)};
    case op_kind::reduce: return {touch(op.dst, true, a), touch(op.src, false, a)};
    case op_kind::finalize: return {touch(op.dst, true, a)};
    case op_kind::copy: {
      const auto to = touch(op.dst, true, a), from = touch(op.src, false, a);
      if (to.space == from.space && to.begin == from.begin) return {};  // in place: the executor skips it
      return {to, from};
    }
  }
  return {};
}

// Two operations that touch overlapping memory, one of them writing, must be ordered
// by the dependencies.
std::string races(const schedule& s, aliasing a) {
  const std::size_t n = s.ops.size();
  std::vector<std::vector<bool>> before(n, std::vector<bool>(n, false));  // before[j][i]: i precedes j
  for (std::size_t j = 0; j < n; ++j)
    for (auto d : s.deps_of(s.ops[j])) {
      if (d >= j) return "op " + std::to_string(j) + " depends on a later op";
      before[j][d] = true;
      for (std::size_t i = 0; i < j; ++i)
        if (before[d][i]) before[j][i] = true;
    }
  std::vector<std::vector<access>> acc(n);
  for (std::size_t i = 0; i < n; ++i) acc[i] = accesses(s.ops[i], a);
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t i = 0; i < j; ++i) {
      if (before[j][i]) continue;
      for (const auto& x : acc[i])
        for (const auto& y : acc[j])
          if (x.space == y.space && (x.writes || y.writes) && x.begin < y.end && y.begin < x.end &&
              x.begin != x.end && y.begin != y.end)
            return "ops " + std::to_string(i) + " and " + std::to_string(j) + " race on buffer " + std::to_string(x.space);
    }
  return {};
}

// ---- simulation: every reduced element holds every rank exactly once -----------

// A symbolic element: which ranks' inputs were combined into it, and how.
struct parts {
  std::uint64_t ranks = 0;
  bool twice = false;    // some rank was combined more than once
  std::string grouping;  // the combines that made it, operands in order: "(x0 (x1 x2))"
};

parts input_of(int rank) { return {std::uint64_t{1} << rank, false, "x" + std::to_string(rank)}; }

struct rank_memory {
  std::vector<parts> input, output, scratch, staging;
  std::vector<parts>& of(buffer_id b) {
    switch (b) {
      case buffer_id::input: return input;
      case buffer_id::output: return output;
      case buffer_id::scratch: return scratch;
      case buffer_id::staging: return staging;
    }
    return output;
  }
};

// Runs every rank's schedule serially; a send completes only together with its
// receive (rendezvous), so a schedule that needs buffering to progress deadlocks here.
std::string simulate(const std::vector<schedule>& plans, std::vector<rank_memory>& mem) {
  const int p = int(plans.size());
  std::vector<std::vector<bool>> done(static_cast<std::size_t>(p)), posted(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    done[std::size_t(r)].assign(plans[std::size_t(r)].ops.size(), false);
    posted[std::size_t(r)].assign(plans[std::size_t(r)].ops.size(), false);
  }
  auto combine = [](parts& into, const parts& from, coll::operand_order order) {
    into.twice |= from.twice || (into.ranks & from.ranks) != 0;
    into.ranks |= from.ranks;
    into.grouping = order == coll::operand_order::received_first ? "(" + from.grouping + " " + into.grouping + ")"
                                                                   : "(" + into.grouping + " " + from.grouping + ")";
  };
  auto ready = [&](int r, std::size_t i) {
    for (auto d : plans[std::size_t(r)].deps_of(plans[std::size_t(r)].ops[i]))
      if (!done[std::size_t(r)][d]) return false;
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& m = mem[std::size_t(r)];
      const auto& ops = plans[std::size_t(r)].ops;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (done[std::size_t(r)][i] || !ready(r, i)) continue;
        const auto& op = ops[i];
        auto at = [&](region reg, std::size_t k) -> parts& { return m.of(reg.buffer)[reg.offset + k]; };
        switch (op.kind) {
          case op_kind::copy:
            for (std::size_t k = 0; k < op.dst.count; ++k) at(op.dst, k) = at(op.src, k);
            break;
          case op_kind::reduce:
            for (std::size_t k = 0; k < op.dst.count; ++k) combine(at(op.dst, k), at(op.src, k), op.order);
            break;
          case op_kind::finalize: break;
          case op_kind::send:  // completes with its receive
            progress = progress || !posted[std::size_t(r)][i];
            posted[std::size_t(r)][i] = true;
            continue;
          case op_kind::recv:
          case op_kind::recv_reduce: {
            // Find the peer's posted, unfinished send with this tag.
            const auto& theirs = plans[std::size_t(op.peer)].ops;
            std::size_t j = 0;
            for (; j < theirs.size(); ++j)
              if (theirs[j].kind == op_kind::send && theirs[j].peer == r && theirs[j].tag == op.tag &&
                  posted[std::size_t(op.peer)][j] && !done[std::size_t(op.peer)][j])
                break;
            if (j == theirs.size()) continue;
            auto& sender = mem[std::size_t(op.peer)];
            for (std::size_t k = 0; k < op.dst.count; ++k) {
              const parts& v = sender.of(theirs[j].src.buffer)[theirs[j].src.offset + k];
              if (op.kind == op_kind::recv) {
                at(op.dst, k) = v;
              } else {
                if (op.base.count != 0) at(op.dst, k) = at(op.base, k);  // onto base, not onto what dst held
                combine(at(op.dst, k), v, op.order);
              }
            }
            done[std::size_t(op.peer)][j] = true;
            break;
          }
        }
        done[std::size_t(r)][i] = true;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r)
    for (std::size_t i = 0; i < done[std::size_t(r)].size(); ++i)
      if (!done[std::size_t(r)][i]) return "deadlock: rank " + std::to_string(r) + " op " + std::to_string(i) + " never finishes";
  return {};
}

std::vector<rank_memory> fresh_memory(const std::vector<schedule>& plans, std::size_t input, std::size_t output) {
  std::vector<rank_memory> mem(plans.size());
  for (std::size_t r = 0; r < plans.size(); ++r) {
    mem[r].input.assign(input, input_of(int(r)));
    mem[r].output.assign(output, parts{});
    mem[r].scratch.assign(plans[r].scratch_count, parts{});
    mem[r].staging.assign(plans[r].staging_count, parts{});
  }
  return mem;
}

std::string every_rank_once(std::span<const parts> values, int p) {
  const std::uint64_t all = p == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << p) - 1;
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (values[k].twice) return "element " + std::to_string(k) + " has a rank's part twice";
    if (values[k].ranks != all) return "element " + std::to_string(k) + " misses a rank's part";
  }
  return {};
}

// The checks every schedule gets, then `outcome` on the simulated memory.
template <class A, class Kind, class Outcome>
void check_plans(const grid_point& g, std::size_t input, std::size_t output, aliasing alias, Outcome outcome) {
  for (std::size_t slice_bytes : {std::size_t{12}, std::size_t{512 * 1024}}) {  // many slices, and one
    INFO(A::name, " P=", g.size, " N=", g.count, " root=", g.root, " slice bytes=", slice_bytes);
    const auto plans = plan_all<A, Kind>(g, slice_bytes);
    CHECK(unmatched_messages(plans) == "");
    for (int r = 0; r < g.size; ++r) {
      INFO("rank ", r);
      CHECK(races(plans[std::size_t(r)], {}) == "");
      aliasing here = alias;
      here.shift *= r;
      if (alias.in_place) CHECK(races(plans[std::size_t(r)], here) == "");
    }
    auto mem = fresh_memory(plans, input, output);
    const auto stuck = simulate(plans, mem);
    CHECK(stuck == "");
    if (stuck.empty()) outcome(mem);
  }
}

const std::vector<int> sizes{1, 2, 3, 4, 5, 6, 7, 8, 9};
std::vector<std::size_t> counts_for(int p) { return {0, 1, 7, std::size_t(p - 1), std::size_t(p), 100}; }

// direct's two all_reduce schedules, each whatever the size, to check and compare them
// (the checks here need only what makes an algorithm, and plan).
struct direct_one_round {
  static constexpr const char* name = "direct (one round)";
  static constexpr bool preserves_rank_order = coll::direct::preserves_rank_order;
  static schedule plan(coll::kind::all_reduce, const coll::plan_request& r) { return coll::direct::all_reduce_in_one_round(r); }
};
struct direct_two_rounds {
  static constexpr const char* name = "direct (two rounds)";
  static constexpr bool preserves_rank_order = coll::direct::preserves_rank_order;
  static schedule plan(coll::kind::all_reduce, const coll::plan_request& r) { return coll::direct::all_reduce_in_two_rounds(r); }
};

// Elements (of 4 bytes, as plan_all plans) of the largest all_reduce direct runs in one round.
const std::size_t one_round_limit = coll::direct::policy.one_round_all_reduce_max_bytes / 4;
const std::vector<int> limit_sizes{1, 2, 3, 5, 8};
const std::vector<std::size_t> limit_counts{0, 1, 7, one_round_limit - 1, one_round_limit, one_round_limit + 1};

// True if no send or receive waits for anything: the schedule takes one message latency.
bool posts_every_message_at_once(const schedule& s) {
  return std::all_of(s.ops.begin(), s.ops.end(), [](const coll::operation& o) {
    return o.kind == op_kind::reduce || o.kind == op_kind::copy || o.kind == op_kind::finalize || o.dep_count == 0;
  });
}

// direct's documented grouping of element k (docs/concepts/algorithm.md): the owner c of
// k's chunk starts from its own part, takes x(c-1), ..., x0 as left operands, then
// x(c+1), ..., x(P-1) as right operands.
std::string direct_grouping(int p, std::size_t n, std::size_t k) {
  int c = 0;
  while (k >= coll::plan::even_chunk(n, p, c).offset + coll::plan::even_chunk(n, p, c).count) ++c;
  std::string g = "x" + std::to_string(c);
  for (int q = c - 1; q >= 0; --q) g = "(x" + std::to_string(q) + " " + g + ")";
  for (int q = c + 1; q < p; ++q) g = "(" + g + " x" + std::to_string(q) + ")";
  return g;
}

// Every rank's output after a simulated all_reduce with A.
template <class A>
std::vector<std::vector<parts>> simulated_all_reduce(int p, std::size_t n) {
  const auto plans = plan_all<A, coll::kind::all_reduce>({p, n}, 512 * 1024);
  auto mem = fresh_memory(plans, n, n);
  REQUIRE(simulate(plans, mem) == "");
  std::vector<std::vector<parts>> out;
  for (auto& m : mem) out.push_back(std::move(m.output));
  return out;
}

// hierarchical<Intra, Inter> on ranks placed on hosts by `Layout`: blocks of two or
// three (the last host short when P does not divide: the flat fallback), two hosts
// taking turns, one host, a host per rank.
enum class layout { blocks_of_2, blocks_of_3, alternating, one_host, alone };
// With `Pieces`, its elements claim to be 1 MiB each, so that even these counts make
// the pipeline of pieces (up to 16 of at least 2 MiB).
template <class Intra, class Inter, layout Layout, bool Pieces = false>
struct hierarchical_on {
  static constexpr const char* name = "hierarchical";
  static constexpr bool preserves_rank_order = coll::hierarchical<Intra, Inter>::preserves_rank_order;
  static schedule plan(coll::kind::all_reduce k, coll::plan_request r) {
    if (Pieces) r.element_size = std::size_t(1) << 20;
    std::vector<int> hosts;
    for (int q = 0; q < r.size; ++q)
      hosts.push_back(Layout == layout::blocks_of_2   ? q / 2
                      : Layout == layout::blocks_of_3 ? q / 3
                      : Layout == layout::alternating ? q % 2
                      : Layout == layout::one_host    ? 0
                                                      : q);
    r.hosts = hosts;
    return coll::hierarchical<Intra, Inter>::plan(k, r);
  }
};

}  // namespace

TEST_CASE("all_reduce schedules: every rank gets every part exactly once") {
  auto each = [&]<class A>() {
    for (int p : sizes)
      for (auto n : counts_for(p)) {
        grid_point g{p, n};
        check_plans<A, coll::kind::all_reduce>(g, n, n, {true, 0}, [&](auto& mem) {
          for (int r = 0; r < p; ++r) CHECK(every_rank_once(mem[std::size_t(r)].output, p) == "");
        });
      }
  };
  each.template operator()<coll::ring>();
  each.template operator()<coll::double_binary_tree>();
  each.template operator()<coll::direct>();  // at these counts, one round
  each.template operator()<coll::halving_doubling>();
  each.template operator()<direct_one_round>();
  each.template operator()<direct_two_rounds>();
  each.template operator()<hierarchical_on<coll::ring, coll::ring, layout::blocks_of_2>>();
  each.template operator()<hierarchical_on<coll::ring, coll::ring, layout::blocks_of_3>>();
  each.template operator()<hierarchical_on<coll::direct, coll::halving_doubling, layout::alternating>>();
  each.template operator()<hierarchical_on<coll::halving_doubling, coll::double_binary_tree, layout::blocks_of_2>>();
  each.template operator()<hierarchical_on<coll::ring, coll::direct, layout::one_host>>();
  each.template operator()<hierarchical_on<coll::ring, coll::ring, layout::alone>>();
  each.template operator()<hierarchical_on<coll::ring, coll::ring, layout::blocks_of_2, true>>();
  each.template operator()<hierarchical_on<coll::direct, coll::double_binary_tree, layout::alternating, true>>();
}

TEST_CASE("hierarchical: only the host's part crosses between hosts, and the host's two parts keep their tags apart") {
  // 3 hosts of 4 ranks: each rank sends to other hosts only Inter's all_reduce of its
  // quarter (a ring of 3: 2 * 2/3 of it), and the rest of its bytes on its host.
  const int p = 12, per_host = 4;
  const std::size_t n = 960;  // divides into 16 pieces, 4 ranks per host and 3 hosts
  std::vector<int> hosts;
  for (int q = 0; q < p; ++q) hosts.push_back(q / per_host);
  for (std::size_t element_size : {std::size_t{4}, std::size_t{1} << 20})  // one piece; sixteen
  for (int r = 0; r < p; ++r) {
    coll::plan_request req{.rank = r, .size = p, .count = n, .element_size = element_size};
    req.hosts = hosts;
    const auto s = coll::hierarchical<coll::ring, coll::ring>::plan(coll::kind::all_reduce{}, req);
    std::size_t across = 0, within = 0;
    for (const auto& o : s.ops)
      if (o.kind == op_kind::send) (hosts[std::size_t(o.peer)] == hosts[std::size_t(r)] ? within : across) += o.src.count;
    INFO("rank ", r);
    // No two messages to or from one peer share a tag: the host's two parts, both
    // with the same neighbours, keep theirs apart.
    std::set<std::tuple<op_kind, int, std::uint32_t>> seen;
    for (const auto& o : s.ops)
      if (o.peer >= 0) CHECK(seen.insert({o.kind == op_kind::send ? o.kind : op_kind::recv, o.peer, o.tag}).second);
    INFO("element size ", element_size);
    CHECK(across == 2 * (n / per_host) * 2 / 3);             // ring all_reduce of n/4 over 3 hosts
    CHECK(within == 2 * (n - n / per_host));                 // reduce-scatter and all-gather of n over 4
  }
}

TEST_CASE("hierarchical: on one host, or one rank a host, the one level's own all_reduce") {
  using H = coll::hierarchical<coll::direct, coll::halving_doubling>;
  const auto same_ops = [](const coll::schedule& a, const coll::schedule& b) {
    if (a.ops.size() != b.ops.size() || a.scratch_count != b.scratch_count) return false;
    for (std::size_t i = 0; i < a.ops.size(); ++i)
      if (a.ops[i].kind != b.ops[i].kind || a.ops[i].peer != b.ops[i].peer || a.ops[i].tag != b.ops[i].tag ||
          a.ops[i].src.count != b.ops[i].src.count || a.ops[i].dst.count != b.ops[i].dst.count)
        return false;
    return true;
  };
  for (int p : {1, 3, 4})
    for (std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(1) << 20})
      for (int r = 0; r < p; ++r) {
        INFO("P=", p, " N=", n, " rank ", r);
        coll::plan_request req{.rank = r, .size = p, .count = n};
        const auto flat_direct = coll::direct::plan(coll::kind::all_reduce{}, req);
        const auto flat_hd = coll::halving_doubling::plan(coll::kind::all_reduce{}, req);
        const std::vector<int> one_host(static_cast<std::size_t>(p), 0);
        std::vector<int> a_host_each(static_cast<std::size_t>(p));
        std::iota(a_host_each.begin(), a_host_each.end(), 0);
        req.hosts = one_host;
        CHECK(same_ops(H::plan(coll::kind::all_reduce{}, req), flat_direct));
        req.hosts = a_host_each;
        if (p > 1) CHECK(same_ops(H::plan(coll::kind::all_reduce{}, req), flat_hd));
      }
}

TEST_CASE("direct all_reduce: one round up to direct_policy's limit, with every message posted at once") {
  for (int p : limit_sizes)
    for (std::size_t n : limit_counts) {
      INFO("P=", p, " N=", n);
      for (int r = 0; r < p; ++r) {
        INFO("rank ", r);
        const coll::plan_request req{.rank = r, .size = p, .count = n, .element_size = 4, .finalize = true};
        // P-1 sends of the whole input, P-1 receives of as much, all posted at once; at
        // P = 2 the one receive reduces onto the input as it arrives.
        const auto one = coll::direct::all_reduce_in_one_round(req);
        int sends = 0, receives = 0;
        for (const auto& o : one.ops) {
          if (o.kind == op_kind::send) {
            ++sends;
            CHECK((o.src.buffer == buffer_id::input && o.src.offset == 0 && o.src.count == n && o.tag == 0));
          }
          if (o.kind == op_kind::recv || o.kind == op_kind::recv_reduce) {
            ++receives;
            CHECK((o.dst.buffer == buffer_id::scratch && o.dst.count == n && o.tag == 0));
          }
          if (o.kind == op_kind::recv_reduce)
            CHECK((p == 2 && o.base.buffer == buffer_id::input && o.base.offset == 0 && o.base.count == n));
        }
        CHECK(sends == p - 1);
        CHECK(receives == p - 1);
        CHECK(posts_every_message_at_once(one));
        // Local steps: at most P copies and 2(P-1) reduces, the output copy, finalize.
        CHECK(one.ops.size() <= std::size_t(2 * (p - 1) + p + 2 * (p - 1) + 2));
        // direct itself runs it up to the limit, and two rounds above it.
        CHECK(coll::direct::runs_in_one_round(req) == (n <= one_round_limit));
        const auto chosen = coll::direct::plan(coll::kind::all_reduce{}, req);
        CHECK(posts_every_message_at_once(chosen) == (n <= one_round_limit || p == 1));
      }
      const auto check_parts = [&](auto& mem) {
        for (int r = 0; r < p; ++r) CHECK(every_rank_once(mem[std::size_t(r)].output, p) == "");
      };
      check_plans<direct_one_round, coll::kind::all_reduce>({p, n}, n, n, {true, 0}, check_parts);
      check_plans<coll::direct, coll::kind::all_reduce>({p, n}, n, n, {true, 0}, check_parts);
    }
}

TEST_CASE("direct all_reduce: one round groups every element as two rounds do, on every rank") {
  for (int p : limit_sizes)
    for (std::size_t n : limit_counts) {
      INFO("P=", p, " N=", n);
      const auto one = simulated_all_reduce<direct_one_round>(p, n);
      const auto two = simulated_all_reduce<direct_two_rounds>(p, n);
      const auto chosen = simulated_all_reduce<coll::direct>(p, n);
      for (std::size_t k = 0; k < n; ++k) {
        const std::string want = direct_grouping(p, n, k);
        for (int r = 0; r < p; ++r) {
          const auto rank = std::size_t(r);
          if (one[rank][k].grouping == want && two[rank][k].grouping == want && chosen[rank][k].grouping == want)
            continue;
          INFO("rank ", r, " element ", k);
          CHECK(one[rank][k].grouping == want);
          CHECK(two[rank][k].grouping == want);
          CHECK(chosen[rank][k].grouping == want);
        }
      }
    }
}

TEST_CASE("reduce schedules: the root gets every part exactly once, for every root") {
  auto each = [&]<class A>() {
    for (int p : sizes)
      for (auto n : counts_for(p))
        for (int root = 0; root < p; ++root)
          check_plans<A, coll::kind::reduce>({p, n, root}, n, n, {true, 0}, [&](auto& mem) {
            CHECK(every_rank_once(mem[std::size_t(root)].output, p) == "");
          });
  };
  each.template operator()<coll::ring>();
  each.template operator()<coll::double_binary_tree>();
  each.template operator()<coll::direct>();
}

TEST_CASE("reduce_scatter schedules: rank r gets every part of chunk r exactly once") {
  auto each = [&]<class A>() {
    for (int p : sizes)
      for (auto n : counts_for(p)) {
        const std::size_t total = n * std::size_t(p);
        check_plans<A, coll::kind::reduce_scatter>({p, n}, total, n, {true, -std::ptrdiff_t(n)}, [&](auto& mem) {
          for (int r = 0; r < p; ++r) CHECK(every_rank_once(mem[std::size_t(r)].output, p) == "");
        });
        std::vector<std::size_t> counts(static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) counts[std::size_t(r)] = r % 3 == 1 ? 0 : n + std::size_t(r);
        const auto displ = coll::plan::displacements(counts);
        grid_point g{p, 0, 0, counts};
        for (std::size_t slice_bytes : {std::size_t{12}, std::size_t{512 * 1024}}) {
          INFO(A::name, " reduce_scatterv P=", p, " N=", n, " slice bytes=", slice_bytes);
          const auto plans = plan_all<A, coll::kind::reduce_scatterv>(g, slice_bytes);
          CHECK(unmatched_messages(plans) == "");
          for (const auto& plan : plans) CHECK(races(plan, {}) == "");  // in-place v-forms: collective tests
          auto mem = fresh_memory(plans, displ.back(), 0);
          for (int q = 0; q < p; ++q) mem[std::size_t(q)].output.assign(counts[std::size_t(q)], parts{});
          REQUIRE(simulate(plans, mem) == "");
          for (int r = 0; r < p; ++r) CHECK(every_rank_once(mem[std::size_t(r)].output, p) == "");
        }
      }
  };
  each.template operator()<coll::ring>();
  each.template operator()<coll::direct>();
  each.template operator()<coll::halving_doubling>();
}

// Provenance check for collectives that only move data: element k of the output
// must hold exactly the part of rank `origin(r, k)`.
template <class Origin>
std::string moved_from(const std::vector<parts>& out, Origin origin) {
  for (std::size_t k = 0; k < out.size(); ++k) {
    const int from = origin(k);
    if (from < 0) continue;
    if (out[k].ranks != std::uint64_t{1} << from || out[k].twice)
      return "element " + std::to_string(k) + " did not come from rank " + std::to_string(from);
  }
  return {};
}

TEST_CASE("data-moving schedules put every element where it belongs") {
  auto each = [&]<class A>() {
    for (int p : sizes)
      for (auto n : counts_for(p)) {
        const std::size_t total = n * std::size_t(p);
        auto chunk_owner = [n](std::size_t k) { return int(k / n); };
        if constexpr (coll::implements<A, coll::kind::broadcast>)
          for (int root = 0; root < p; ++root)
            check_plans<A, coll::kind::broadcast>({p, n, root}, n, n, {true, 0}, [&](auto& mem) {
              for (int r = 0; r < p; ++r) CHECK(moved_from(mem[std::size_t(r)].output, [&](std::size_t) { return root; }) == "");
            });
        if constexpr (coll::implements<A, coll::kind::all_gather>)
          check_plans<A, coll::kind::all_gather>({p, n}, n, total, {true, std::ptrdiff_t(n)}, [&](auto& mem) {
            for (int r = 0; r < p; ++r) CHECK(moved_from(mem[std::size_t(r)].output, chunk_owner) == "");
          });
        if constexpr (coll::implements<A, coll::kind::gather>)
          for (int root = 0; root < p; ++root)
            check_plans<A, coll::kind::gather>({p, n, root}, n, total, {true, std::ptrdiff_t(n)}, [&](auto& mem) {
              CHECK(moved_from(mem[std::size_t(root)].output, chunk_owner) == "");
            });
        if constexpr (coll::implements<A, coll::kind::scatter>)
          for (int root = 0; root < p; ++root)
            check_plans<A, coll::kind::scatter>({p, n, root}, total, n, {true, -std::ptrdiff_t(n)}, [&](auto& mem) {
              for (int r = 0; r < p; ++r) CHECK(moved_from(mem[std::size_t(r)].output, [&](std::size_t) { return root; }) == "");
            });
        if constexpr (coll::implements<A, coll::kind::all_to_all>)
          check_plans<A, coll::kind::all_to_all>({p, n}, total, total, {}, [&](auto& mem) {
            for (int r = 0; r < p; ++r) CHECK(moved_from(mem[std::size_t(r)].output, chunk_owner) == "");
          });
        if constexpr (coll::implements<A, coll::kind::all_to_allv>) {
          grid_point g{p};
          for (int i = 0; i < p; ++i) {
            g.sends_of.emplace_back();
            g.receives_of.emplace_back();
            for (int j = 0; j < p; ++j) {
              g.sends_of.back().push_back(std::size_t(i + 2 * j) % 4 * n / 2);
              g.receives_of.back().push_back(std::size_t(j + 2 * i) % 4 * n / 2);
            }
          }
          const auto plans = plan_all<A, coll::kind::all_to_allv>(g, 12);
          CHECK(unmatched_messages(plans) == "");
          auto mem = fresh_memory(plans, 0, 0);
          for (int r = 0; r < p; ++r) {
            mem[std::size_t(r)].input.assign(coll::plan::displacements(g.sends_of[std::size_t(r)]).back(),
                                              input_of(r));
            mem[std::size_t(r)].output.assign(coll::plan::displacements(g.receives_of[std::size_t(r)]).back(), parts{});
          }
          REQUIRE(simulate(plans, mem) == "");
          for (int r = 0; r < p; ++r) {
            const auto displ = coll::plan::displacements(g.receives_of[std::size_t(r)]);
            CHECK(moved_from(mem[std::size_t(r)].output, [&](std::size_t k) {
                    return int(std::upper_bound(displ.begin(), displ.end(), k) - displ.begin()) - 1;
                  }) == "");
          }
        }
      }
  };
  each.template operator()<coll::ring>();
  each.template operator()<coll::double_binary_tree>();
  each.template operator()<coll::direct>();
  each.template operator()<coll::halving_doubling>();
}

TEST_CASE("barrier schedule: ceil(log2 P) rounds, and no rank finishes before hearing from all") {
  for (int p : sizes) {
    std::vector<schedule> plans;
    for (int r = 0; r < p; ++r) plans.push_back(coll::direct::plan(coll::kind::barrier{}, {.rank = r, .size = p}));
    CHECK(unmatched_messages(plans) == "");
    int rounds = 0;
    while ((1 << rounds) < p) ++rounds;
    for (const auto& s : plans) CHECK(std::count_if(s.ops.begin(), s.ops.end(), [](auto& o) { return o.kind == op_kind::send; }) == rounds);
    // Knowledge spreads along messages: after the schedule every rank knows of all.
    std::vector<std::uint64_t> knows(static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r) knows[std::size_t(r)] = std::uint64_t{1} << r;
    for (int k = 0; k < rounds; ++k) {
      auto next = knows;
      for (int r = 0; r < p; ++r) next[std::size_t((r + (1 << k)) % p)] |= knows[std::size_t(r)];
      knows = next;
    }
    for (int r = 0; r < p; ++r) CHECK(knows[std::size_t(r)] == (std::uint64_t{1} << p) - 1);
  }
}

TEST_CASE("successor lists: each op's dependents in op order, made once by the plan cache, dropped by add()") {
  for (int p : sizes) {
    INFO("P=", p);
    auto s = coll::double_binary_tree::plan(coll::kind::all_reduce{},
                                            {.rank = p / 2, .size = p, .count = 1000, .element_size = 4, .slice_bytes = 256});
    CHECK_FALSE(s.indexed());
    s.index_successors();
    REQUIRE(s.indexed());
    for (std::size_t d = 0; d < s.ops.size(); ++d) {  // against the dependency lists, read forwards
      std::vector<coll::op_id> expected;
      for (std::size_t i = 0; i < s.ops.size(); ++i)
        for (coll::op_id dep : s.deps_of(s.ops[i]))
          if (dep == d) expected.push_back(static_cast<coll::op_id>(i));
      const std::vector<coll::op_id> got(s.successors.begin() + s.successor_begin[d],
                                         s.successors.begin() + s.successor_begin[d + 1]);
      CHECK(got == expected);
    }
    s.copy({buffer_id::output, 0, 1}, {buffer_id::input, 0, 1});
    CHECK_FALSE(s.indexed());
  }
  coll::plan_cache cache;
  const coll::plan_request r{.rank = 1, .size = 4, .count = 100, .element_size = 4};
  int made = 0;
  const auto make = [&] { return ++made, coll::ring::plan(coll::kind::all_reduce{}, r); };
  const auto key = coll::plan_cache::key_of<coll::ring, coll::kind::all_reduce>(r);
  const coll::compact_plan* first = cache.find_or_make(key, 1, 4, {}, make).get();
  CHECK(cache.find_or_make(key, 1, 4, {}, make).get() == first);
  CHECK(made == 1);
  auto s = make();
  s.index_successors();
  REQUIRE(first->size() == s.ops.size());
  REQUIRE(first->edges() == s.successors.size());
  CHECK(std::equal(s.successors.begin(), s.successors.end(), first->successors()));
  CHECK(std::equal(s.successor_begin.begin(), s.successor_begin.end(), first->successor_begin()));
}

// What compact_plan gives back for op i on `rank` is the schedule's op, field for field
// (its dependencies are the successor lists, checked above).
std::string reads_back(const schedule& s, const coll::compact_plan& c, int rank) {
  if (c.size() != s.ops.size()) return "size " + std::to_string(c.size());
  if (c.scratch_count() != s.scratch_count || c.staging_count() != s.staging_count) return "scratch or staging";
  const auto same = [](region x, region y) { return x.buffer == y.buffer && x.offset == y.offset && x.count == y.count; };
  for (coll::op_id i = 0; i < s.ops.size(); ++i) {
    const coll::operation& o = s.ops[i];
    const coll::operation got = c.op(i, rank);
    const bool message = o.kind == op_kind::send || o.kind == op_kind::recv || o.kind == op_kind::recv_reduce;
    if (got.kind != o.kind || got.tag != o.tag || got.order != o.order || (message && got.peer != o.peer) ||
        !same(got.dst, o.dst) || !same(got.src, o.src) || got.base.count != o.base.count ||
        (o.base.count != 0 && !same(got.base, o.base)))
      return "op " + std::to_string(i);
  }
  return "";
}

TEST_CASE("compact plans: every rank's plan reads back exactly; a plan that turns with the rank is one for all ranks") {
  auto each = [&]<class A>(std::string name) {
    for (int p : {1, 2, 3, 5, 8})
      for (std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(8 * 5 * 3), std::size_t(1001)})
        for (std::size_t slice : {std::size_t(12), std::size_t(512 * 1024)}) {
          INFO(name, ", P=", p, ", n=", n, ", slice bytes ", slice);
          const auto check = [&]<class Kind>(std::string kind_name, int root, coll::blocks_per_rank turned, bool turns) {
            INFO(kind_name, ", root ", root);
            const auto plans = plan_all<A, Kind>({p, n, root}, slice);
            std::vector<coll::compact_plan> compact;
            for (int r = 0; r < p; ++r) {
              compact.emplace_back(plans[std::size_t(r)], r, p, turned, true);
              CHECK_MESSAGE(reads_back(plans[std::size_t(r)], compact.back(), r) == "", "rank ", r);
              // Merging equal regions is only a saving: without it, the same plan.
              CHECK_MESSAGE(reads_back(plans[std::size_t(r)], coll::compact_plan(plans[std::size_t(r)], r, p, turned), r) == "",
                            "rank ", r, ", regions not merged");
            }
            // What the algorithm claims (turns_with_rank, which a simulated cluster plans
            // by) holds, and it claims it for every even call the test expects to turn.
            // all_reduce splits n into P parts; the others count one part, all alike.
            const bool even = n % std::size_t(p) == 0 || !std::is_same_v<Kind, coll::kind::all_reduce>;
            const coll::plan_request asked{.rank = 0, .size = p, .count = n, .root = root, .element_size = 4,
                                           .finalize = true, .slice_bytes = slice};
            const bool claimed = coll::turns_with_rank<A>(Kind{}, asked);
            if (std::string(coll::automatic::chosen_name(Kind{}, asked)) == A::name)
              CHECK(coll::turns_with_rank<coll::automatic>(Kind{}, asked) == claimed);
            if (std::is_same_v<A, coll::ring>) CHECK(claimed == (turns && even));
            if (claimed || (turns && even))
              for (int r = 1; r < p; ++r) CHECK_MESSAGE(compact[std::size_t(r)] == compact[0], "rank ", r);
          };
          if constexpr (coll::implements<A, coll::kind::all_reduce>)
            check.template operator()<coll::kind::all_reduce>("all_reduce", 0, {true, true}, std::is_same_v<A, coll::ring>);
          if constexpr (coll::implements<A, coll::kind::reduce_scatter>)
            check.template operator()<coll::kind::reduce_scatter>("reduce_scatter", 0, {true, false}, std::is_same_v<A, coll::ring>);
          if constexpr (coll::implements<A, coll::kind::all_gather>)
            check.template operator()<coll::kind::all_gather>("all_gather", 0, {false, true}, std::is_same_v<A, coll::ring>);
          if constexpr (coll::implements<A, coll::kind::broadcast>)
            for (int root = 0; root < p; ++root) check.template operator()<coll::kind::broadcast>("broadcast", root, {}, false);
          if constexpr (coll::implements<A, coll::kind::reduce>)
            for (int root = 0; root < p; ++root) check.template operator()<coll::kind::reduce>("reduce", root, {}, false);
          if constexpr (coll::implements<A, coll::kind::all_to_all>)
            check.template operator()<coll::kind::all_to_all>("all_to_all", 0, {true, true}, std::is_same_v<A, coll::direct>);
        }
  };
  each.template operator()<coll::ring>("ring");
  each.template operator()<coll::double_binary_tree>("double_binary_tree");
  each.template operator()<coll::direct>("direct");
  each.template operator()<coll::halving_doubling>("halving_doubling");

  // The process keeps one copy of equal plans, and another for a plan that differs.
  const auto ring_of = [](int r, std::size_t n) {
    return coll::compact_plan(coll::ring::plan(coll::kind::all_reduce{}, {.rank = r, .size = 6, .count = n, .element_size = 4}),
                              r, 6, {true, true}, true);
  };
  const auto a = coll::shared_plan(ring_of(0, 60)), b = coll::shared_plan(ring_of(4, 60));
  const auto c = coll::shared_plan(ring_of(4, 61));
  CHECK(a == b);
  CHECK(a != c);
  CHECK(*a == ring_of(5, 60));
  CHECK_FALSE(*c == ring_of(5, 61));  // 61 elements do not split evenly: rank 5's chunk is shorter
  CHECK(a->bytes() < 6 * 2 * 5 * sizeof(coll::operation));  // smaller than one rank's schedule

  // A plan (a user's algorithm's) that names a rank outside the group fails as it is
  // compacted, before any message is posted, and says which rank.
  for (int bad : {-1, 4}) {
    schedule s;
    s.send(bad, 0, {buffer_id::input, 0, 1});
    try {
      coll::compact_plan c(s, 2, 4);
      FAIL("a plan naming rank ", bad, " was compacted");
    } catch (const coll::error& e) {
      CHECK(e.code() == coll::errc::invalid_peer);
      CHECK(std::string(e.what()).find("rank " + std::to_string(bad)) != std::string::npos);
    }
  }
}

TEST_CASE("ring all_reduce takes 2(P-1) steps") {
  for (int p : sizes) {
    INFO("P=", p);
    // One slice per chunk: one send and one receive per step.
    const auto s = coll::ring::plan(coll::kind::all_reduce{}, {.rank = 0, .size = p, .count = 1000, .element_size = 4});
    const auto sends = std::count_if(s.ops.begin(), s.ops.end(), [](auto& o) { return o.kind == op_kind::send; });
    const auto recvs = std::count_if(s.ops.begin(), s.ops.end(),
                                     [](auto& o) { return o.kind == op_kind::recv || o.kind == op_kind::recv_reduce; });
    CHECK(sends == coll::ring::all_reduce_steps(p));
    CHECK(recvs == 2 * (p - 1));
    CHECK(coll::ring::all_reduce_steps(p) == 2 * (p - 1));
  }
}

TEST_CASE("halving_doubling: 2 log2 P steps at powers of two, two more to fold, the ring's bytes") {
  for (int p : sizes) {
    int lg = 0;
    while ((2 << lg) <= p) ++lg;
    const bool folded = (1 << lg) != p;
    INFO("P=", p);
    CHECK(coll::halving_doubling::all_reduce_steps(p) == 2 * lg + (folded ? 2 : 0));
    const std::size_t n = 1024 * 1024;
    for (int r = 0; r < p; ++r) {
      INFO("rank ", r);
      const coll::plan_request req{.rank = r, .size = p, .count = n, .element_size = 4, .slice_bytes = 64 * n};
      const auto s = coll::halving_doubling::plan(coll::kind::all_reduce{}, req);
      std::size_t sent = 0;
      int sends = 0, receives = 0;
      for (const auto& o : s.ops) {
        if (o.kind == op_kind::send) sent += o.src.count, ++sends;
        if (o.kind == op_kind::recv || o.kind == op_kind::recv_reduce) ++receives;
      }
      // A rank in the steps sends (P'-1)/P' of the buffer twice (plus, folded, the
      // result to its partner); a folded rank sends its input once.
      const auto p2 = std::size_t(1) << lg;
      const bool folds_in = r < 2 * (p - int(p2)) && r % 2 == 0;
      const bool takes_fold = r < 2 * (p - int(p2)) && r % 2 == 1;
      const std::size_t want = folds_in ? n : 2 * (n - n / p2) + (takes_fold ? n : 0);
      CHECK(sent == want);
      // One slice per message: a message per step each way (the fold's one and back).
      CHECK(sends == (folds_in ? 1 : 2 * lg + (takes_fold ? 1 : 0)));
      CHECK(receives == (folds_in ? 1 : 2 * lg + (takes_fold ? 1 : 0)));
    }
  }
}

TEST_CASE("halving_doubling's cost: steps between ranks of one host at the on-host figures, where the call knows the hosts") {
  const coll::link_costs across{.latency_s = 6e-6, .per_message_s = 1e-6, .seconds_per_byte = 1.0 / 50e9},
      near{.latency_s = 3e-6, .per_message_s = 2e-7, .seconds_per_byte = 1.0 / 360e9};
  const auto step = [](const coll::link_costs& c, double bytes) { return c.latency_s + c.per_message_s + bytes * c.seconds_per_byte; };
  const double n = 4 << 20;
  // 16 ranks, hosts of 4: the halving's steps at distances 8 and 4 cross hosts, 2 and 1
  // do not; each doubling step mirrors one.
  std::vector<int> hosts16(16);
  for (int r = 0; r < 16; ++r) hosts16[std::size_t(r)] = r / 4;
  coll::plan_request req{.size = 16, .count = std::size_t(n), .element_size = 1, .costs = across, .on_host_costs = near};
  const double flat = 2 * (step(across, n / 2) + step(across, n / 4) + step(across, n / 8) + step(across, n / 16));
  CHECK(coll::halving_doubling::cost(coll::kind::all_reduce{}, req) == doctest::Approx(flat).epsilon(1e-12));
  req.hosts = hosts16;
  const double by_hosts = 2 * (step(across, n / 2) + step(across, n / 4) + step(near, n / 8) + step(near, n / 16));
  CHECK(coll::halving_doubling::cost(coll::kind::all_reduce{}, req) == doctest::Approx(by_hosts).epsilon(1e-12));
  // 12 ranks, hosts of 4: ranks 0-7 fold in pairs on their hosts; the 8 in the steps
  // are old ranks 1, 3, 5, 7, 8, 9, 10, 11, so only the last step stays on a host.
  std::vector<int> hosts12(12);
  for (int r = 0; r < 12; ++r) hosts12[std::size_t(r)] = r / 4;
  req.size = 12;
  req.hosts = hosts12;
  const double folded = 2 * step(near, n) + 2 * (step(across, n / 2) + step(across, n / 4) + step(near, n / 8));
  CHECK(coll::halving_doubling::cost(coll::kind::all_reduce{}, req) == doctest::Approx(folded).epsilon(1e-12));
  // reduce_scatter of 1 MiB parts at 16 ranks: one phase, the same links.
  req = {.size = 16, .count = std::size_t(n) / 16, .element_size = 1, .costs = across, .on_host_costs = near, .hosts = hosts16};
  const double phase = step(across, n / 2) + step(across, n / 4) + step(near, n / 8) + step(near, n / 16);
  CHECK(coll::cost_of<coll::halving_doubling>(coll::kind::reduce_scatter{}, req) == doctest::Approx(phase).epsilon(1e-12));
}

TEST_CASE("double binary tree: depth ceil(log2(P+1)), in-order, each rank a leaf in exactly one tree") {
  for (int p = 1; p <= 64; ++p) {
    INFO("P=", p);
    int expected_depth = 0;
    while ((1 << expected_depth) < p + 1) ++expected_depth;
    CHECK(coll::double_binary_tree::depth(p) == expected_depth);
    std::vector<int> leaf_count(std::size_t(p), 0);
    for (int t = 0; t < 2; ++t) {
      const auto links = coll::double_binary_tree::links(p, t);
      for (int r = 0; r < p; ++r) {  // one rank's links, as the plans find them, are the same
        const auto one = coll::double_binary_tree::links_of(r, p, t);
        CHECK((one.parent == links[std::size_t(r)].parent && one.left == links[std::size_t(r)].left &&
               one.right == links[std::size_t(r)].right));
      }
      const int root = coll::double_binary_tree::root_of(p, t);
      CHECK(links[std::size_t(root)].parent == -1);
      int deepest = 0;
      for (int r = 0; r < p; ++r) {
        const auto& me = links[std::size_t(r)];
        if (me.left < 0 && me.right < 0) ++leaf_count[std::size_t(r)];
        // In-order: the left child is lower, the right child higher, parents agree.
        if (me.left >= 0) CHECK((me.left < r && links[std::size_t(me.left)].parent == r));
        if (me.right >= 0) CHECK((me.right > r && links[std::size_t(me.right)].parent == r));
        if (r != root) CHECK(me.parent >= 0);
        int level = 1;
        for (int up = me.parent; up >= 0; up = links[std::size_t(up)].parent) ++level;
        deepest = std::max(deepest, level);
      }
      if (t == 0) CHECK(deepest == expected_depth);
      else CHECK(deepest <= expected_depth + 1);
    }
    if (p > 1)
      for (int r = 0; r < p; ++r) CHECK(leaf_count[std::size_t(r)] == 1);
  }
}

TEST_CASE("cost model: direct all_reduce takes one latency up to direct_policy's limit, two above it") {
  const coll::link_costs latency_only{.latency_s = 1, .per_message_s = 0, .seconds_per_byte = 0, .reduce_seconds_per_byte = 0};
  const std::size_t limit_bytes = coll::direct::policy.one_round_all_reduce_max_bytes;
  const coll::kind::all_reduce all_reduce;
  for (int p : {2, 3, 8, 64}) {
    INFO("P=", p);
    auto bytes = [&](std::size_t n) { return coll::plan_request{.size = p, .count = n, .element_size = 1, .costs = latency_only}; };
    CHECK(coll::direct::cost(all_reduce, bytes(8)) == 1.0);
    CHECK(coll::direct::cost(all_reduce, bytes(limit_bytes)) == 1.0);
    CHECK(coll::direct::cost(all_reduce, bytes(limit_bytes + 1)) == 2.0);
    CHECK(coll::ring::cost(all_reduce, bytes(8)) >= 2.0);
    CHECK(coll::double_binary_tree::cost(all_reduce, bytes(8)) >= 2.0);
  }
}

TEST_CASE("automatic: direct for tiny messages; for large commutative ones halving-doubling at powers of two above 2, "
          "else ring; neither for a non-commutative op") {
  const std::string_view ring = coll::ring::name, direct = coll::direct::name, halving = coll::halving_doubling::name;
  for (int p : {2, 3, 4, 8, 16}) {
    INFO("P=", p);
    coll::plan_request tiny{.size = p, .count = 2, .element_size = 4};
    coll::plan_request large{.size = p, .count = std::size_t{16} << 20, .element_size = 4};
    // direct's one round takes one latency, ring, tree and its own two rounds at least two.
    CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, tiny) == direct);
    tiny.commutative = false;
    CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, tiny) == direct);
    // The same bytes as ring in 2 log2 P steps instead of 2(P-1); at P = 2 they tie and
    // ring, earlier in the list, wins; other P pay the fold's two whole buffers.
    const bool power_of_two = (p & (p - 1)) == 0;
    CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, large) == (power_of_two && p > 2 ? halving : ring));
    large.commutative = false;
    CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, large) != ring);
    CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, large) != halving);
    for (std::size_t n = 1; n < (std::size_t{1} << 28); n *= 3) {
      coll::plan_request any{.size = p, .count = n, .element_size = 4, .commutative = false};
      for (const std::string_view chosen : {coll::automatic::chosen_name(coll::kind::all_reduce{}, any),
                                            coll::automatic::chosen_name(coll::kind::reduce{}, any),
                                            coll::automatic::chosen_name(coll::kind::reduce_scatter{}, any)})
        CHECK((chosen != ring && chosen != halving));
    }
  }
}

TEST_CASE("automatic: hierarchical for large sums across hosts slower than the host's links; never on one host") {
  const std::string_view hierarchical = coll::hierarchical<>::name;
  const coll::link_costs fast{.latency_s = 2e-6, .per_message_s = 0.5e-6, .seconds_per_byte = 1 / 10e9},
      slow{.latency_s = 30e-6, .per_message_s = 4e-6, .seconds_per_byte = 1 / 1e9};
  for (int per_host : {2, 4}) {
    for (int hosts : {2, 3}) {
      const int p = per_host * hosts;
      INFO(hosts, " hosts of ", per_host);
      std::vector<int> host_of;
      for (int q = 0; q < p; ++q) host_of.push_back(q / per_host);
      coll::plan_request r{.size = p, .count = std::size_t{16} << 20, .element_size = 4, .costs = slow,
                           .on_host_costs = fast, .hosts = host_of};
      CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, r) == hierarchical);
      // Its estimate: only 1/L of the buffer crosses, so it beats the flat ones by about L.
      CHECK(coll::hierarchical<>::cost(coll::kind::all_reduce{}, r) < coll::ring::cost(coll::kind::all_reduce{}, r) / 1.5);
      r.commutative = false;  // it reduces the host's part first
      CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, r) != hierarchical);
      r.commutative = true;
      r.count = 2;  // a few bytes: one round of direct
      CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, r) == coll::direct::name);
    }
  }
  for (int p = 1; p <= 8; ++p)
    for (std::size_t n = 1; n < (std::size_t{1} << 26); n *= 4) {
      const std::vector<int> one_host(std::size_t(p), 0);
      coll::plan_request r{.size = p, .count = n, .element_size = 4, .costs = fast, .on_host_costs = fast, .hosts = one_host};
      CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, r) != hierarchical);
    }
}

// The choice automatic made when it held one closed list of cost functions, kept here
// as the reference its composition over algorithm types must agree with.
namespace reference_choice {
double ring_all_reduce(int p, double bytes, const coll::link_costs& c) {
  const double share = bytes * (p - 1) / p;
  return 2.0 * (p - 1) * (c.latency_s + c.per_message_s) + 2.0 * share * c.seconds_per_byte;
}
double tree_all_reduce(int p, double bytes, const coll::link_costs& c) {
  return 2.0 * coll::double_binary_tree::depth(p) * (c.latency_s + c.per_message_s) + 2.0 * bytes * c.seconds_per_byte;
}
double direct_all_reduce(int p, double bytes, const coll::link_costs& c) {
  if (bytes <= double(coll::direct::policy.one_round_all_reduce_max_bytes))
    return c.latency_s + (p - 1) * (c.per_message_s + bytes * (c.seconds_per_byte + c.reduce_seconds_per_byte));
  const double share = bytes * (p - 1) / p;
  return 2.0 * c.latency_s + 2.0 * (p - 1) * c.per_message_s + 2.0 * share * c.seconds_per_byte +
         share * c.reduce_seconds_per_byte;
}
// Halving-doubling on P' = 2^k <= P ranks; the other E = P - P' fold into a partner,
// which costs two more messages of the whole buffer.
double halving_doubling_all_reduce(int p, double bytes, const coll::link_costs& c) {
  int k = 0;
  while ((2 << k) <= p) ++k;
  const double p2 = double(1 << k), folds = p > (1 << k) ? 1 : 0;
  return (2 * k + 2 * folds) * (c.latency_s + c.per_message_s) +
         (2 * bytes * (p2 - 1) / p2 + 2 * folds * bytes) * c.seconds_per_byte;
}
// The same for one phase of P parts of `part` bytes: the fold hands over the P parts
// and back the own one.
double halving_doubling_sharded(int p, double part, const coll::link_costs& c) {
  int k = 0;
  while ((2 << k) <= p) ++k;
  const double p2 = double(1 << k), folds = p > (1 << k) ? 1 : 0;
  return (k + 2 * folds) * (c.latency_s + c.per_message_s) +
         (part * p * (p2 - 1) / p2 + folds * (part * p + part)) * c.seconds_per_byte;
}
std::string_view cheapest(const coll::plan_request& r, double ring_s, double tree_s, double direct_s,
                          double halving_doubling_s = std::numeric_limits<double>::infinity()) {
  if (!r.commutative) ring_s = halving_doubling_s = std::numeric_limits<double>::infinity();
  auto clearly_below = [](double a, double b) { return a < b * (1 - 1e-9); };
  std::string_view best = coll::ring::name;
  double best_s = ring_s;
  if (clearly_below(tree_s, best_s)) best = coll::double_binary_tree::name, best_s = tree_s;
  if (clearly_below(direct_s, best_s)) best = coll::direct::name, best_s = direct_s;
  if (clearly_below(halving_doubling_s, best_s)) best = coll::halving_doubling::name;
  return best;
}
std::string_view all_reduce(const coll::plan_request& r) {
  const double b = double(r.count) * double(r.element_size);
  return cheapest(r, ring_all_reduce(r.size, b, r.costs), tree_all_reduce(r.size, b, r.costs), direct_all_reduce(r.size, b, r.costs),
                  halving_doubling_all_reduce(r.size, b, r.costs));
}
std::string_view rooted(const coll::plan_request& r) {
  const double b = double(r.count) * double(r.element_size);
  const auto& c = r.costs;
  const int p = r.size;
  return cheapest(r, (p - 1) * (c.latency_s + c.per_message_s) + b * c.seconds_per_byte,
                  coll::double_binary_tree::depth(p) * (c.latency_s + c.per_message_s) + b * c.seconds_per_byte,
                  c.latency_s + (p - 1) * (c.per_message_s + b * c.seconds_per_byte));
}
std::string_view sharded(const coll::plan_request& r) {
  double b = double(r.count) * double(r.element_size);
  if (!r.counts.empty()) {
    b = 0;
    for (auto n : r.counts) b = std::fmax(b, double(n) * double(r.element_size));
  }
  const auto& c = r.costs;
  const int p = r.size;
  return cheapest(r, (p - 1) * (c.latency_s + c.per_message_s + b * c.seconds_per_byte),
                  std::numeric_limits<double>::infinity(), c.latency_s + (p - 1) * (c.per_message_s + b * c.seconds_per_byte),
                  halving_doubling_sharded(p, b, c));
}
}  // namespace reference_choice

TEST_CASE("automatic: its composition picks what the closed list of cost functions picked") {
  // The default figures, shm's, tcp's and device_ipc's, and latency alone.
  const coll::link_costs links[] = {
      coll::link_costs{},
      {.latency_s = 1e-6, .per_message_s = 0.3e-6, .seconds_per_byte = 1.0 / 5e9, .reduce_seconds_per_byte = 1.0 / 8e9},
      {.latency_s = 25e-6, .per_message_s = 4e-6, .seconds_per_byte = 1.0 / 2.5e9, .reduce_seconds_per_byte = 1.0 / 8e9},
      {.latency_s = 10e-6, .per_message_s = 2e-6, .seconds_per_byte = 1.0 / 100e9, .reduce_seconds_per_byte = 1.0 / 200e9},
      {.latency_s = 1, .per_message_s = 0, .seconds_per_byte = 0, .reduce_seconds_per_byte = 0}};
  int compared = 0;
  for (const auto& c : links)
    for (int p : {1, 2, 3, 4, 5, 8, 16, 64})
      for (bool commutative : {true, false})
        for (std::size_t n = 1; n < (std::size_t{1} << 30); n = n * 2 + n / 3) {
          const std::vector<std::size_t> uneven = [&] {
            std::vector<std::size_t> v(std::size_t(p), n);
            v[0] = n / 2 + 1;
            return v;
          }();
          coll::plan_request r{.size = p, .count = n, .element_size = 4, .commutative = commutative, .costs = c};
          coll::plan_request v = r;
          v.counts = uneven;
          INFO("P=", p, " n=", n, " commutative=", commutative);
          CHECK(coll::automatic::chosen_name(coll::kind::all_reduce{}, r) == reference_choice::all_reduce(r));
          CHECK(coll::automatic::chosen_name(coll::kind::broadcast{}, r) == reference_choice::rooted(r));
          CHECK(coll::automatic::chosen_name(coll::kind::reduce{}, r) == reference_choice::rooted(r));
          CHECK(coll::automatic::chosen_name(coll::kind::all_gather{}, r) == reference_choice::sharded(r));
          CHECK(coll::automatic::chosen_name(coll::kind::reduce_scatter{}, r) == reference_choice::sharded(r));
          CHECK(coll::automatic::chosen_name(coll::kind::all_gatherv{}, v) == reference_choice::sharded(v));
          CHECK(coll::automatic::chosen_name(coll::kind::reduce_scatterv{}, v) == reference_choice::sharded(v));
          const std::string_view direct = coll::direct::name;
          CHECK(coll::automatic::chosen_name(coll::kind::gather{}, r) == direct);
          CHECK(coll::automatic::chosen_name(coll::kind::all_to_all{}, r) == direct);
          CHECK(coll::automatic::chosen_name(coll::kind::barrier{}, r) == direct);
          ++compared;
        }
  CHECK(compared > 1000);
}

// An algorithm the library does not ship: automatic_of takes it beside the built-in
// ones, with nothing else to edit.
struct always_one_latency {
  static constexpr const char* name = "always_one_latency";
  static constexpr bool preserves_rank_order = true;
  static coll::schedule plan(coll::kind::all_reduce k, const coll::plan_request& r) { return coll::direct::plan(k, r); }
  static double cost(coll::kind::all_reduce, const coll::plan_request& r) { return r.costs.latency_s; }
};

TEST_CASE("automatic_of: a list of algorithm types, any of them user-written") {
  using with_mine = coll::automatic_of<coll::ring, coll::double_binary_tree, coll::direct, always_one_latency>;
  static_assert(coll::implements<with_mine, coll::kind::all_reduce> && coll::implements<with_mine, coll::kind::all_to_all>);
  const coll::plan_request large{.size = 4, .count = std::size_t{16} << 20, .element_size = 4};
  CHECK(std::string_view(with_mine::chosen_name(coll::kind::all_reduce{}, large)) == always_one_latency::name);
  CHECK(std::string_view(with_mine::chosen_name(coll::kind::all_gather{}, large)) ==
        coll::automatic::chosen_name(coll::kind::all_gather{}, large));
  CHECK(with_mine::plan(coll::kind::all_reduce{}, large).ops.size() == coll::direct::plan(coll::kind::all_reduce{}, large).ops.size());
  // Only ring: it is not offered an op that needs rank order.
  using only_ring = coll::automatic_of<coll::ring>;
  static_assert(!only_ring::preserves_rank_order && !coll::implements<only_ring, coll::kind::gather>);
  coll::plan_request ordered = large;
  ordered.commutative = false;
  CHECK_THROWS_AS(only_ring::plan(coll::kind::all_reduce{}, ordered), coll::error);
}

// An algorithm that writes only a v-form implements its even form too: the even call is
// planned as the v-form with every rank's count the same, and costed so.
struct gathers_unevenly {
  static constexpr const char* name = "gathers_unevenly";
  static constexpr bool preserves_rank_order = true;
  static coll::schedule plan(coll::kind::all_gatherv k, const coll::plan_request& r) { return coll::ring::plan(k, r); }
  static double cost(coll::kind::all_gatherv, const coll::plan_request& r) { return double(r.counts.size()); }
};

TEST_CASE("an even collective is planned as its v-form") {
  static_assert(coll::implements<gathers_unevenly, coll::kind::all_gather> &&
                coll::estimates_cost<gathers_unevenly, coll::kind::all_gather> &&
                !coll::implements<gathers_unevenly, coll::kind::gather> &&
                !coll::implements<gathers_unevenly, coll::kind::reduce_scatter>);
  static_assert(coll::implements<coll::direct, coll::kind::all_to_all> && !coll::implements<coll::ring, coll::kind::all_to_all>);
  for (int p : {1, 2, 3, 5})
    for (std::size_t n : {std::size_t{0}, std::size_t{7}}) {
      const coll::plan_request even{.rank = p - 1, .size = p, .count = n, .element_size = 4};
      const std::vector<std::size_t> counts(std::size_t(p), n);
      coll::plan_request uneven = even;
      uneven.counts = counts;
      CHECK(coll::plan_of<gathers_unevenly>(coll::kind::all_gather{}, even).ops.size() ==
            coll::ring::plan(coll::kind::all_gatherv{}, uneven).ops.size());
      CHECK(coll::cost_of<gathers_unevenly>(coll::kind::all_gather{}, even) == double(p));
      // all_to_all: the counts sent and received alike.
      uneven.recv_counts = counts;
      const auto lowered = coll::plan_of<coll::direct>(coll::kind::all_to_all{}, even);
      const auto direct_v = coll::direct::plan(coll::kind::all_to_allv{}, uneven);
      REQUIRE(lowered.ops.size() == direct_v.ops.size());
      for (std::size_t i = 0; i < lowered.ops.size(); ++i) {
        CHECK(lowered.ops[i].peer == direct_v.ops[i].peer);
        CHECK(lowered.ops[i].dst.count == direct_v.ops[i].dst.count);
        CHECK(lowered.ops[i].src.count == direct_v.ops[i].src.count);
      }
    }
  // Through automatic_of, as a candidate of its even form.
  using with_it = coll::automatic_of<gathers_unevenly>;
  CHECK(std::string_view(with_it::chosen_name(coll::kind::all_gather{}, {.size = 3, .count = 4})) == gathers_unevenly::name);
}

// Names users' programs may still spell the old way: they compile (with a deprecation
// warning, silenced here) and mean what their replacements mean.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("the deprecated names still compile and agree with their replacements") {
  CHECK(coll::no_op == coll::no_dependency);
  schedule s;
  const auto first = s.copy(region{buffer_id::output, 0, 1}, region{buffer_id::input, 0, 1}, {coll::no_op});
  CHECK(s.ops[first].dep_count == 0);

  const coll::link_costs costs{.latency_s = 1e-6, .per_message_s = 1e-7, .seconds_per_byte = 1e-9, .reduce_seconds_per_byte = 1e-10};
  for (int p : {1, 2, 3, 8})
    for (double bytes : {0.0, 16.0, 1e6, 1e9}) {
      const coll::plan_request r = coll::cost::request_of(p, bytes, costs);
      CHECK(coll::cost::ring_all_reduce(p, bytes, costs) == coll::ring::cost(coll::kind::all_reduce{}, r));
      CHECK(coll::cost::tree_all_reduce(p, bytes, costs) == coll::double_binary_tree::cost(coll::kind::all_reduce{}, r));
      CHECK(coll::cost::direct_sharded(p, bytes, costs) == coll::cost_of<coll::direct>(coll::kind::all_gather{}, r));
      const auto chosen = coll::automatic::choose(coll::kind::all_reduce{}, r);
      CHECK(std::string_view(coll::to_string(chosen)) == coll::automatic::chosen_name(coll::kind::all_reduce{}, r));
    }
}
#pragma GCC diagnostic pop
