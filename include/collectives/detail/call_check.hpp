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
#include "../config.hpp"
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
COLLECTIVES_DECL std::string difference(const call_signature& theirs, const call_signature& mine);

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
  const auto ctx = call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout());
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

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "call_check.ipp"
#endif
