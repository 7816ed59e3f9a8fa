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
#include "../runtime/element_work.hpp"
#include "../runtime/executor_core.hpp"
#include "../runtime/in_flight.hpp"
#include "../runtime/workspace.hpp"

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
      : comm_(comm), mine_(mine), all_(std::size_t(comm.size())),
        plan_(plan_of<direct>(kind::all_gather{}, {.rank = comm.rank(), .size = comm.size(), .count = 1}), comm.rank(),
              comm.size()),
        ctx_(call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout())),
        core_(plan_, comm.transport(), &mine_, all_.data(), work_, room_) {}

  // To its end, advancing the communicator's calls in flight meanwhile.
  void run() {
    try {
      core_.run(ctx_, [&] { return comm_.progress_in_flight(); });
    } catch (const error& e) {
      if (e.code() != errc::timeout) throw;
      throw check_timed_out(ctx_, comm_.rank(), all_);
    }
    compare_calls(ctx_.name, comm_.rank(), all_, mine_);
  }

  // As steps (a call that starts without waiting runs it as its first stage).
  void start() { core_.start(); }
  bool advance() {
    if (!core_.advance(ctx_)) return false;
    compare_calls(ctx_.name, comm_.rank(), all_, mine_);
    return true;
  }
  std::size_t finished() const noexcept { return core_.finished(); }
  [[noreturn]] void fail_timed_out() { core_.fail(check_timed_out(ctx_, comm_.rank(), all_)); }
  void abandon() noexcept { core_.abandon(); }

 private:
  communicator<Tr>& comm_;
  call_signature mine_;
  std::vector<call_signature> all_;
  compact_plan plan_;
  call_context ctx_;
  moved_bytes_work work_{sizeof(call_signature)};
  executor_workspace<typename Tr::request> room_;
  executor_core<Tr> core_;
};

// The check as the first stage of a call started without waiting (in_flight.hpp).
template <transport Tr>
class call_check_stage final : public call_prologue {
 public:
  call_check_stage(communicator<Tr>& comm, const char* call, const call_signature& mine) : exchange_(comm, call, mine) {
    exchange_.start();
  }
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
  call_check_exchange<Tr>(comm, call, mine).run();
}

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "call_check.ipp"
#endif
