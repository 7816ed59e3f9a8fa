#include "harness.hpp"

using namespace testing;

namespace {

// The root gets the reduction; no other rank's buffers change.
template <class A, class T, class Op>
void check_reduce(int p, std::size_t n, int root, bool in_place, const std::vector<std::vector<T>>& given,
                  const std::vector<T>& want) {
  const auto info = case_info(describe<A, T, Op>(p, n, in_place) + " root=" + std::to_string(root));
  on_ranks(p, [&](comm& c) {
    const auto& original = given[std::size_t(c.rank())];
    const bool is_root = c.rank() == root;
    std::vector<T> input = original;
    const std::vector<T> untouched(n, input_value<T, Op>(99, 0));
    std::vector<T> output = untouched;
    if (in_place) {
      coll::reduce<A>(c, input, Op{}, root);
      return mismatch<T>(input, is_root ? want : original, is_root ? "result" : "a non-root's data");
    }
    coll::reduce<A>(c, input, output, Op{}, root);
    if (auto m = mismatch<T>(input, original, "input changed"); !m.empty()) return m;
    return mismatch<T>(output, is_root ? want : untouched, is_root ? "result" : "a non-root's output");
  });
}

template <class T, class Op>
void check_grid() {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p, runs_large_case<T, Op>)) {
      const auto given = all_inputs<T, Op>(p, n);
      const auto want = reduced<T, Op>(given);
      const int root = int(n % std::size_t(p));  // 0 and others across the grid
      each_algorithm_for<coll::kind::reduce, T, Op>([&]<class A>() {
        if constexpr (A::preserves_rank_order || coll::is_commutative_v<Op>)
          for (bool in_place : {false, true}) check_reduce<A, T, Op>(p, n, root, in_place, given, want);
      });
    }
}

}  // namespace

TEST_CASE("reduce: every algorithm, built-in op and type matches the serial reference") {
  each_type([]<class T>() { each_builtin_op<T>([]<class Op>() { check_grid<T, Op>(); }); });
}

TEST_CASE("reduce: a user op on a user struct") { check_grid<scored, arg_max>(); }

TEST_CASE("reduce: a non-commutative op is applied in rank order by tree, direct and automatic") {
  check_grid<mat2, mat_mul>();
}

TEST_CASE("reduce: every root") {
  for (int p : rank_counts)
    for (int root = 0; root < p; ++root) {
      const auto given = all_inputs<std::int64_t, coll::sum>(p, 1000);
      const auto want = reduced<std::int64_t, coll::sum>(given);
      each_algorithm<coll::kind::reduce>([&]<class A>() {
        check_reduce<A, std::int64_t, coll::sum>(p, 1000, root, false, given, want);
      });
    }
}
