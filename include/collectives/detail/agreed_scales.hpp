// The fixed-point scales the ranks agree on (agree_fixed_point, fixed_point.hpp), and the
// error of a sum that no scale holds, which reproducible_sum's calls share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "../algorithm/automatic.hpp"
#include "../algorithm/direct.hpp"
#include "../ops/accumulate.hpp"
#include "call.hpp"

namespace collectives::detail {

// The error of a sum some of whose values are infinity or NaN: `whose[q]` is nonzero
// where rank q's are.
inline error not_finite_values(const char* call, int ranks, std::span<const char> whose) {
  return error(errc::not_finite, std::string(call) + ": the values of rank(s) " +
                                     ranks_missing(ranks, [&](int q) { return whose[std::size_t(q)] != 0; }) +
                                     " hold infinity or NaN, which no fixed-point scale holds");
}

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
    throw not_finite_values(call, comm.size(), whose);
  }
  std::vector<fixed_point> scales(largest.size());  // all zeros: any scale is exact
  for (std::size_t b = 0; b < largest.size(); ++b)
    if (largest[b] != all_zero) scales[b] = fixed_point::for_terms(largest[b], terms);
  return scales;
}

}  // namespace collectives::detail
