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

call_signature signature_of(const char* call, const plan_request& req, std::uint64_t op, std::uint64_t algorithm,
                            bool counts_must_agree) {
  call_signature mine;
  std::strncpy(mine.call, call, sizeof mine.call - 1);
  mine.count = req.count;
  if (counts_must_agree) mine.counts = fingerprint(std::as_bytes(req.counts));
  mine.op = op;
  mine.algorithm = algorithm;
  mine.element_size = static_cast<std::uint32_t>(req.element_size);
  mine.root = req.root;
  return mine;
}

void compare_calls(const char* call, int rank, std::span<const call_signature> all, const call_signature& mine) {
  for (std::size_t q = 0; q < all.size(); ++q)
    if (auto d = difference(all[q], mine); !d.empty())
      throw error(errc::call_mismatch, std::string(call) + " on rank " + std::to_string(rank) + ": rank " + std::to_string(q) +
                                           " " + d);
}

error check_timed_out(const call_context& ctx, int rank, std::span<const call_signature> all) {
  return exchange_timed_out(ctx, rank, "in the call check (COLLECTIVES_CHECK_CALLS)",
                            ranks_missing(int(all.size()), [&](int q) { return all[std::size_t(q)].call[0] == '\0'; }));
}

}  // namespace collectives::detail
