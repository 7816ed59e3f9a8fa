// agree_fixed_point: the scale at which ranks add values exactly (ops/accumulate.hpp's
// fixed_point), agreed from every rank's largest magnitude: the sum it gives is the
// same however the values are split across ranks, and in whatever order they add.
//
//   coll::fixed_point scale = coll::agree_fixed_point(comm, coll::largest_exponent<float>(my_values), terms);
//   std::vector<std::int64_t> sums(n);                  // zeros
//   for (auto& batch : my_batches) scale.accumulate(sums, batch);
//   coll::all_reduce(comm, sums, coll::sum{});           // exact
//   for (i...) out[i] = scale.value_of<coll::bf16>(sums[i]);
#pragma once

#include <cstdint>

#include "detail/agreed_scales.hpp"

namespace collectives {

// `largest_exponent`: largest_exponent() of every value this rank will add; `terms`:
// how many values at most add up into one element, over all ranks. Every rank passes
// the same `terms`. Throws errc::not_finite on every rank when any rank's values hold
// infinity or NaN, naming those ranks.
template <transport Tr>
fixed_point agree_fixed_point(communicator<Tr>& comm, int largest_exponent, std::uint64_t terms) {
  return detail::agree_fixed_points(comm, "agree_fixed_point", {largest_exponent}, terms)[0];
}

}  // namespace collectives
