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
#include "../bootstrap/fingerprint.hpp"
#include "../communicator.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../runtime/in_flight.hpp"
#include "exchange.hpp"

namespace collectives::detail {

using bootstrap::fingerprint;

// Hashed once per type: every call passes its op's (a hash of its name was a seventh of
// a one-rank call's instructions).
template <class Type>
std::uint64_t type_fingerprint() {
  static const std::uint64_t hash = fingerprint(typeid(Type).name());
  return hash;
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

// This rank's call. `op` and `algorithm`: the fingerprints of their types.
COLLECTIVES_DECL call_signature signature_of(const char* call, const plan_request& req, std::uint64_t op,
                                             std::uint64_t algorithm, bool counts_must_agree);

// Throws errc::call_mismatch naming the first rank whose call differs from `mine`.
COLLECTIVES_DECL void compare_calls(const char* call, int rank, std::span<const call_signature> all, const call_signature& mine);

// The check's timeout, in the user's words: the executor would describe the check's
// own exchange ("to receive from rank 2 (1 elements)"); the user made `ctx.name`, and
// the ranks whose signatures did not come (their slots are still empty: the executor
// cancelled every receive, so the slots of those that came are whole) had not made it.
COLLECTIVES_DECL error check_timed_out(const call_context& ctx, int rank, std::span<const call_signature> all);

// The check's exchange: an all-gather of every rank's signature, as a call of its own.
template <transport Tr>
class call_check_exchange {
 public:
  call_check_exchange(communicator<Tr>& comm, const char* call, const call_signature& mine)
      : rank_(comm.rank()), mine_(mine), all_(std::size_t(comm.size())),
        exchange_(comm, plan_of<direct>(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1}),
                  &mine_, all_.data(), sizeof(call_signature), call,
                  [this](const call_context& ctx) { return check_timed_out(ctx, rank_, all_); }) {}

  // To its end, advancing the communicator's calls in flight meanwhile.
  void run(communicator<Tr>& comm) {
    exchange_.run(comm);
    compare_calls(exchange_.context().name, rank_, all_, mine_);
  }

  // As steps (a call that starts without waiting runs it as its first stage).
  bool advance() {
    if (!exchange_.advance()) return false;
    compare_calls(exchange_.context().name, rank_, all_, mine_);
    return true;
  }
  std::size_t finished() const noexcept { return exchange_.finished(); }
  [[noreturn]] void fail_timed_out() { exchange_.fail_timed_out(); }
  void abandon() noexcept { exchange_.abandon(); }

 private:
  int rank_;
  call_signature mine_;
  std::vector<call_signature> all_;
  service_exchange<Tr> exchange_;
};

// The check as the first stage of a call started without waiting (in_flight.hpp).
template <transport Tr>
class call_check_stage final : public call_prologue {
 public:
  call_check_stage(communicator<Tr>& comm, const char* call, const call_signature& mine) : exchange_(comm, call, mine) {}
  bool advance() override { return exchange_.advance(); }
  std::size_t finished() const noexcept override { return exchange_.finished(); }
  [[noreturn]] void fail_timed_out() override { exchange_.fail_timed_out(); }
  void abandon() noexcept override { exchange_.abandon(); }

 private:
  call_check_exchange<Tr> exchange_;
};

// Confirms, before the call, that every rank makes the same one.
template <transport Tr>
void check_same_call(communicator<Tr>& comm, const char* call, const call_signature& mine) {
  call_check_exchange<Tr>(comm, call, mine).run(comm);
}

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "call_check.ipp"
#endif
