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

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "algorithm/automatic.hpp"
#include "algorithm/direct.hpp"
#include "detail/call.hpp"
#include "ops/accumulate.hpp"

namespace collectives {

namespace detail {

// The scale of each block of elements: `largest` holds this rank's largest_exponent()
// of each block; the ranks take the largest of each (one all_reduce), and a block whose
// values hold infinity or NaN on any rank is an error on every rank, which then learns
// which ranks' values do (one all_gather).
template <transport Tr>
std::vector<fixed_point> agree_fixed_points(communicator<Tr>& comm, const char* call, std::vector<int> largest,
                                            std::uint64_t terms) {
  constexpr int not_finite = std::numeric_limits<int>::max(), all_zero = std::numeric_limits<int>::min();
  const bool mine_not_finite = std::find(largest.begin(), largest.end(), not_finite) != largest.end();
  max larger;
  run<automatic>(comm, call, kind::all_reduce{}, {.count = largest.size()}, largest.data(), largest.data(), larger);
  if (std::find(largest.begin(), largest.end(), not_finite) != largest.end()) {
    std::vector<char> whose(static_cast<std::size_t>(comm.size()));
    const char flag = mine_not_finite;
    no_reduce keep;
    run<direct>(comm, call, kind::all_gather{}, {.count = 1}, &flag, whose.data(), keep);
    std::string ranks;
    for (std::size_t r = 0; r < whose.size(); ++r)
      if (whose[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw error(errc::not_finite, std::string(call) + ": the values of rank(s) " + ranks +
                                      " hold infinity or NaN, which no fixed-point scale holds");
  }
  std::vector<fixed_point> scales(largest.size());  // all zeros: any scale is exact
  for (std::size_t b = 0; b < largest.size(); ++b)
    if (largest[b] != all_zero) scales[b] = fixed_point::for_terms(largest[b], terms);
  return scales;
}

}  // namespace detail

// `largest_exponent`: largest_exponent() of every value this rank will add; `terms`:
// how many values at most add up into one element, over all ranks. Every rank passes
// the same `terms`. Throws errc::not_finite on every rank when any rank's values hold
// infinity or NaN, naming those ranks.
template <transport Tr>
fixed_point agree_fixed_point(communicator<Tr>& comm, int largest_exponent, std::uint64_t terms) {
  return detail::agree_fixed_points(comm, "agree_fixed_point", {largest_exponent}, terms)[0];
}

}  // namespace collectives
