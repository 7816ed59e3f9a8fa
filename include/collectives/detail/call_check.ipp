// The call check's words (call_check.hpp): inline in header-only use, compiled once into
// collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "call_check.hpp"

namespace collectives::detail {

std::string difference(const call_signature& theirs, const call_signature& mine) {
  auto n = [](auto v) { return std::to_string(v); };
  if (std::strncmp(theirs.call, mine.call, sizeof mine.call) != 0)
    return std::string("called ") + theirs.call + " where this rank called " + mine.call;
  if (theirs.count != mine.count) return "passes " + n(theirs.count) + " elements where this rank passes " + n(mine.count);
  if (theirs.counts != mine.counts) return "passes other per-rank counts";
  if (theirs.element_size != mine.element_size)
    return "uses " + n(theirs.element_size) + "-byte elements where this rank uses " + n(mine.element_size) + "-byte ones";
  if (theirs.root != mine.root) return "names root " + n(theirs.root) + " where this rank names root " + n(mine.root);
  if (theirs.op != mine.op) return "uses another reduce op";
  if (theirs.algorithm != mine.algorithm) return "asks for another algorithm";
  return {};
}

}  // namespace collectives::detail
