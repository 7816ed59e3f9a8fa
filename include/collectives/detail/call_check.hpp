// Call checking: before a collective, the ranks exchange a short signature of the
// call they are making, so that a rank that calls something else (another
// collective, count, element type, op, root or algorithm) is named at once rather
// than found by a timeout or not at all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "../algorithm/direct.hpp"
#include "../algorithm/executor_core.hpp"
#include "../communicator.hpp"
#include "../error.hpp"
#include "exchange.hpp"

namespace collectives::detail {

// FNV-1a: the same bytes give the same hash in every process of a program.
inline std::uint64_t fingerprint(std::span<const std::byte> bytes, std::uint64_t h = 14695981039346656037ull) {
  for (std::byte b : bytes) h = (h ^ std::uint64_t(b)) * 1099511628211ull;
  return h;
}
inline std::uint64_t fingerprint(std::string_view s) { return fingerprint(std::as_bytes(std::span{s.data(), s.size()})); }

template <class Type>
std::uint64_t type_fingerprint() {
  return fingerprint(typeid(Type).name());
}

struct call_signature {
  char call[24] = {};
  std::uint64_t count = 0;
  std::uint64_t counts = 0;      // fingerprint of a v-form's per-rank counts
  std::uint64_t op = 0;          // fingerprint of the op's type
  std::uint64_t algorithm = 0;   // fingerprint of the algorithm's type
  std::uint32_t element_size = 0;
  std::int32_t root = 0;
};

// How `theirs` differs from `mine`, in words; empty if it does not.
inline std::string difference(const call_signature& theirs, const call_signature& mine) {
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

// `op` and `algorithm`: the fingerprints of their types.
template <transport Tr>
void check_same_call(communicator<Tr>& comm, const char* call, const plan_request& req, std::uint64_t op,
                     std::uint64_t algorithm, bool counts_must_agree) {
  call_signature mine;
  std::strncpy(mine.call, call, sizeof mine.call - 1);
  mine.count = req.count;
  if (counts_must_agree) mine.counts = fingerprint(std::as_bytes(req.counts));
  mine.op = op;
  mine.algorithm = algorithm;
  mine.element_size = static_cast<std::uint32_t>(req.element_size);
  mine.root = req.root;

  std::vector<call_signature> all(static_cast<std::size_t>(comm.size()));
  const schedule plan = direct::plan(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1});
  const auto ctx = call_context::starting_now(call, comm.next_call(), comm.timeout());
  try {
    exchange(comm, plan, &mine, all.data(), sizeof mine, ctx);
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
    // The executor would describe the check's own exchange ("to receive from rank 2
    // (1 elements)"); the user made `call`, and the ranks that sent no signature (the
    // executor cancelled every receive, so the slots of those that did are whole) never
    // made a collective call.
    std::string silent;
    for (int q = 0; q < comm.size(); ++q)
      if (all[std::size_t(q)].call[0] == '\0') silent += (silent.empty() ? "" : ", ") + std::to_string(q);
    throw error(errc::timeout, std::string(call) + ": timed out after " + std::to_string(ctx.timeout_ms) + " ms on rank " +
                                   std::to_string(comm.rank()) + " in the call check (COLLECTIVES_CHECK_CALLS): " +
                                   (silent.empty() ? "every rank's call arrived too late"
                                                   : "rank(s) " + silent + " made no collective call"));
  }
  for (int q = 0; q < comm.size(); ++q)
    if (auto d = difference(all[std::size_t(q)], mine); !d.empty())
      throw error(errc::call_mismatch, std::string(call) + " on rank " + std::to_string(comm.rank()) + ": rank " +
                                           std::to_string(q) + " " + d);
}

}  // namespace collectives::detail
