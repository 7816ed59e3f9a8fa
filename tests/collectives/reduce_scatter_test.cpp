#include "harness.hpp"

using namespace testing;

namespace {

// Rank r gets part r (counts[r] elements at displ[r]) of the reduction of all inputs.
template <class A, class T, class Op>
void check_reduce_scatter(int p, const std::vector<std::size_t>& counts, bool uneven, bool in_place,
                          const std::vector<std::vector<T>>& given, const std::vector<T>& want) {
  const auto info = case_info(describe<A, T, Op>(p, counts[0], in_place) + (uneven ? " v-form" : ""));
  const auto displ = coll::plan::displacements(counts);
  on_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    const auto& original = given[r];
    const std::span<const T> mine{want.data() + displ[r], counts[r]};
    std::vector<T> input = original;
    if (in_place) {
      if (uneven) coll::reduce_scatterv<A>(c, input, counts, Op{});
      else coll::reduce_scatter<A>(c, input, Op{});
      std::vector<T> expected = original;  // the rest of the buffer stays as it was
      std::copy(mine.begin(), mine.end(), expected.begin() + std::ptrdiff_t(displ[r]));
      return mismatch<T>(input, expected, "in-place buffer");
    }
    std::vector<T> output(counts[r], input_value<T, Op>(99, 0));
    if (uneven) coll::reduce_scatterv<A>(c, input, output, counts, Op{});
    else coll::reduce_scatter<A>(c, input, output, Op{});
    if (auto m = mismatch<T>(input, original, "input changed"); !m.empty()) return m;
    return mismatch<T>(output, mine, "result");
  });
}

template <class T, class Op>
void check_grid() {
  for (int p : rank_counts)
    for (std::size_t n : chunk_counts(p, runs_large_case<T, Op>))
      for (bool uneven : {false, true}) {
        if (uneven && n > 1000) continue;  // the v-forms share the even forms' schedules
        const auto counts = uneven ? uneven_counts(p, n) : std::vector<std::size_t>(std::size_t(p), n);
        const auto given = all_inputs<T, Op>(p, coll::plan::displacements(counts).back());
        const auto want = reduced<T, Op>(given);
        auto each = [&]<class A>() {
          if constexpr (A::preserves_rank_order || coll::is_commutative_v<Op>)
            for (bool in_place : {false, true})
              check_reduce_scatter<A, T, Op>(p, counts, uneven, in_place, given, want);
        };
        if (uneven) each_algorithm_for<coll::kind::reduce_scatterv, T, Op>(each);
        else each_algorithm_for<coll::kind::reduce_scatter, T, Op>(each);
      }
}

}  // namespace

TEST_CASE("reduce_scatter and reduce_scatterv: every algorithm, built-in op and type") {
  each_type([]<class T>() { each_builtin_op<T>([]<class Op>() { check_grid<T, Op>(); }); });
}

TEST_CASE("reduce_scatter: a user op on a user struct") { check_grid<scored, arg_max>(); }

TEST_CASE("reduce_scatter: a non-commutative op is applied in rank order by direct and automatic") {
  check_grid<mat2, mat_mul>();
}
