#include <cmath>
#include <random>
#include <utility>

#include "harness.hpp"

using namespace testing;

namespace {

// direct's two all_reduce schedules, each whatever the size, to compare them.
struct direct_one_round {
  static constexpr const char* name = "direct (one round)";
  static constexpr bool preserves_rank_order = true;
  static coll::schedule plan(coll::kind::all_reduce, const coll::plan_request& r) {
    return coll::direct::all_reduce_in_one_round(r);
  }
};
struct direct_two_rounds {
  static constexpr const char* name = "direct (two rounds)";
  static constexpr bool preserves_rank_order = true;
  static coll::schedule plan(coll::kind::all_reduce, const coll::plan_request& r) {
    return coll::direct::all_reduce_in_two_rounds(r);
  }
};

// x -> scale * x + shift. Composing such maps (apply `first`, then `then`) is
// associative but not commutative, and in floats its rounding depends on the grouping.
struct affine {
  float scale, shift;
};
struct compose {
  affine operator()(const affine& first, const affine& then) const {
    return {first.scale * then.scale, first.shift * then.scale + then.shift};
  }
};

// Random floats of mixed magnitudes, whose sums round differently in every order.
template <class T>
std::vector<std::vector<T>> random_inputs(int p, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f), scale(0.5f, 1.5f);
  auto magnitude = [&] { return std::pow(10.0f, float(int(gen() % 7) - 3)); };
  std::vector<std::vector<T>> given(static_cast<std::size_t>(p), std::vector<T>(n));
  for (auto& v : given)
    for (auto& x : v) {
      if constexpr (std::is_same_v<T, affine>) x = {scale(gen), value(gen) * magnitude()};
      else x = value(gen) * magnitude();
    }
  return given;
}

// The serial reference in direct's documented order: the owner c of an element's
// chunk starts from its own part, folds in x(c-1), ..., x0 from the left, then
// x(c+1), ..., x(P-1) from the right; then finalize.
template <class T, class Op>
std::vector<T> in_direct_order(const std::vector<std::vector<T>>& x, std::size_t n, Op op) {
  const int p = int(x.size());
  std::vector<T> out(n);
  for (int c = 0; c < p; ++c) {
    const auto [offset, count] = coll::plan::even_chunk(n, p, c);
    for (std::size_t i = offset; i < offset + count; ++i) {
      T acc = x[std::size_t(c)][i];
      for (int q = c - 1; q >= 0; --q) acc = op(x[std::size_t(q)][i], acc);
      for (int q = c + 1; q < p; ++q) acc = op(acc, x[std::size_t(q)][i]);
      if constexpr (coll::has_finalize<Op, T>) acc = op.finalize(acc, p);
      out[i] = acc;
    }
  }
  return out;
}

// direct's one round and two rounds, each in place and out of place, and direct as it
// chooses, must give the reference's bits on every rank.
template <class T, class Op>
void check_one_round_matches_two(Op op) {
  const std::size_t limit = coll::direct::policy.one_round_all_reduce_max_bytes / sizeof(T);
  for (int p : rank_counts)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t(p - 1), std::size_t(p),
                          std::size_t{1000}, limit - 1, limit, limit + 1}) {
      const auto info = case_info(std::string(typeid(Op).name()) + " P=" + std::to_string(p) + " N=" + std::to_string(n));
      const auto given = random_inputs<T>(p, n, unsigned(p * 7919 + n));
      const auto want = in_direct_order(given, n, op);
      on_ranks(p, [&](comm& c) {
        const auto& mine = given[std::size_t(c.rank())];
        std::vector<T> one = mine, two = mine, chosen = mine, one_out(n), two_out(n);
        coll::all_reduce<direct_one_round>(c, one, op);
        coll::all_reduce<direct_one_round>(c, mine, one_out, op);
        coll::all_reduce<direct_two_rounds>(c, two, op);
        coll::all_reduce<direct_two_rounds>(c, mine, two_out, op);
        coll::all_reduce<coll::direct>(c, chosen, op);
        for (auto [got, what] : {std::pair{&one, "one round, in place"}, {&one_out, "one round, out of place"},
                                 {&two, "two rounds, in place"}, {&two_out, "two rounds, out of place"},
                                 {&chosen, "direct"}})
          if (auto m = mismatch<T>(*got, want, what); !m.empty()) return m;
        auto rank0 = one;  // and, plainly, the same bits as rank 0
        coll::broadcast<coll::direct>(c, rank0, 0);
        return mismatch<T>(one, rank0, "rank 0's one-round result");
      });
    }
}

template <class A, class T, class Op>
void check_all_reduce(int p, std::size_t n, bool in_place, const std::vector<std::vector<T>>& given,
                      const std::vector<T>& want) {
  const auto info = case_info(describe<A, T, Op>(p, n, in_place));
  on_ranks(p, [&](comm& c) {
    const auto& original = given[std::size_t(c.rank())];
    std::vector<T> input = original, output;
    if (in_place) {
      coll::all_reduce<A>(c, input, Op{});
      output = std::move(input);
    } else {
      output.assign(n, input_value<T, Op>(99, 0));
      coll::all_reduce<A>(c, input, output, Op{});
      if (auto m = mismatch<T>(input, original, "input changed"); !m.empty()) return m;
    }
    return mismatch<T>(output, want, "result");
  });
}

// Every rank count and element count, for every algorithm that can apply Op.
template <class T, class Op>
void check_grid() {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p, runs_large_case<T, Op>)) {
      const auto given = all_inputs<T, Op>(p, n);
      const auto want = reduced<T, Op>(given);
      each_algorithm_for<coll::kind::all_reduce, T, Op>([&]<class A>() {
        if constexpr (A::preserves_rank_order || coll::is_commutative_v<Op>)
          for (bool in_place : {false, true}) check_all_reduce<A, T, Op>(p, n, in_place, given, want);
      });
    }
}

}  // namespace

TEST_CASE("all_reduce: every algorithm, built-in op and type matches the serial reference") {
  each_type([]<class T>() { each_builtin_op<T>([]<class Op>() { check_grid<T, Op>(); }); });
}

TEST_CASE("all_reduce: a user op on a user struct") { check_grid<scored, arg_max>(); }

TEST_CASE("all_reduce: a non-commutative op is applied in rank order by tree, direct and automatic") {
  // ring reorders operands and refuses such ops at compile time (see compile_fail/).
  check_grid<mat2, mat_mul>();
}

// Ranks placed on hosts as a job of several hosts would be, declared through
// comm.hosts(): blocks of two (the last short at odd P: the flat fallback), two hosts
// taking turns, a host per rank. Every layout, op and count against the reference.
template <class Intra, class Inter, class T, class Op>
void check_hierarchical_layouts() {
  using H = coll::hierarchical<Intra, Inter>;
  const std::vector<std::pair<const char*, int (*)(int)>> layouts{
      {"blocks of 2", [](int q) { return q / 2; }},
      {"alternating", [](int q) { return q % 2; }},
      {"a host each", [](int q) { return q; }}};
  for (int p : rank_counts)
    for (const auto& layout : layouts)  // not a structured binding: clang 14's lambdas cannot capture one
      for (std::size_t n : element_counts(p)) {
        const auto given = all_inputs<T, Op>(p, n);
        const auto want = reduced<T, Op>(given);
        for (bool in_place : {false, true}) {
          const auto info = case_info(std::string(layout.first) + ": " + describe<H, T, Op>(p, n, in_place));
          on_ranks(p, [&](comm& c) {
            std::vector<int> hosts;
            for (int q = 0; q < p; ++q) hosts.push_back(layout.second(q));
            c.hosts() = hosts;
            std::vector<T> data = given[std::size_t(c.rank())], out(n);
            if (in_place) coll::all_reduce<H>(c, data, Op{});
            else coll::all_reduce<H>(c, data, out, Op{});
            c.hosts().clear();  // the next call that needs them learns them again
            return mismatch<T>(in_place ? data : out, want, "result");
          });
        }
      }
}

TEST_CASE("all_reduce: hierarchical on ranks declared on several hosts") {
  check_hierarchical_layouts<coll::ring, coll::ring, std::int64_t, coll::sum>();
  check_hierarchical_layouts<coll::ring, coll::ring, float, coll::avg>();
  check_hierarchical_layouts<coll::direct, coll::halving_doubling, std::int32_t, coll::bit_xor>();
  check_hierarchical_layouts<coll::halving_doubling, coll::double_binary_tree, double, coll::min>();
  check_hierarchical_layouts<coll::ring, coll::direct, scored, arg_max>();
}

TEST_CASE("all_reduce: one value") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      const int total = coll::all_reduce(c, c.rank() + 1, coll::sum{});
      const double mean = coll::all_reduce(c, double(c.rank()), coll::avg{});
      if (total != p * (p + 1) / 2) return "sum of ranks is " + std::to_string(total);
      if (mean != double(p - 1) / 2) return "mean of ranks is " + std::to_string(mean);
      return {};
    });
}

TEST_CASE("all_reduce: a stateful lambda wrapped as commutative") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      const int scale = c.size() + 2;  // captured state, known only at run time
      auto scaled_max = coll::commutative([scale](int a, int b) { return std::max(a, b * scale / scale); });
      std::vector<int> v(1000, c.rank());
      coll::all_reduce<coll::ring>(c, v, scaled_max);
      for (int x : v)
        if (x != p - 1) return "got " + std::to_string(x);
      return {};
    });
}

TEST_CASE("all_reduce: direct's one round gives, bitwise, its two rounds' floats on every rank") {
  check_one_round_matches_two<float>(coll::sum{});
  check_one_round_matches_two<float>(coll::avg{});
  check_one_round_matches_two<affine>(compose{});  // a non-commutative user op
}
