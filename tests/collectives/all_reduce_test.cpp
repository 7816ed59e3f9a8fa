#include "harness.hpp"

using namespace testing;

namespace {

template <class A, class T, class Op>
void check_all_reduce(int p, std::size_t n, bool in_place, const std::vector<std::vector<T>>& given,
                      const std::vector<T>& want) {
  INFO(describe<A, T, Op>(p, n, in_place));
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
    for (std::size_t n : element_counts(p)) {
      const auto given = all_inputs<T, Op>(p, n);
      const auto want = reduced<T, Op>(given);
      each_algorithm<coll::kind::all_reduce>([&]<class A>() {
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
