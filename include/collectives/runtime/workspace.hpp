// The executor's bookkeeping for one call, kept by the communicator between calls.
// A small call is over in a microsecond or two, and a dozen allocations would be a
// visible part of that; reused containers keep their capacity, so a repeated call
// allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "../concepts/schedule.hpp"

namespace collectives {

// Where a fused receive reduces into: the destination and the op, without their
// types, so that one workspace serves calls of every element type and op.
struct fused_target {
  void* dst = nullptr;
  void* op = nullptr;
  operand_order order = operand_order::received_last;
  const void* base = nullptr;  // the other operand, where it is not dst (operation::base)
};

// Host memory for scratch and staging that outlives the call. Up to `kept_bytes` it
// stays for the next call. A larger buffer (a big call) stays while calls keep needing
// it, since faulting in fresh pages on every call of a training step's repeated large
// call cost more than the call's own copies (direct's 4 MiB all_reduce over shm took
// 1.6 times as long); it is given back once `kept_calls` calls in a row needed no more than
// `kept_bytes`, so a communicator that has moved on to small calls holds little.
class reusable_host_memory {
 public:
  static constexpr std::size_t kept_bytes = std::size_t(1) << 20;
  static constexpr int kept_calls = 8;
  static constexpr std::size_t alignment = 64;

  // Room for `bytes`, aligned to 64; valid until the next get() or trim().
  std::byte* get(std::size_t bytes) {
    if (bytes > capacity_) {
      memory_.reset();  // the old pages go back before the new ones are taken
      capacity_ = 0;    // and a failed allocation leaves none
      memory_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{alignment})));
      capacity_ = bytes;
    }
    if (bytes > kept_bytes) calls_without_large_ = -1;  // trim() at this call's end makes it 0
    return memory_.get();
  }
  // At the end of each call.
  void trim() {
    if (capacity_ > kept_bytes && ++calls_without_large_ >= kept_calls) {
      memory_.reset();
      capacity_ = 0;
      calls_without_large_ = 0;
    }
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct release {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{alignment}); }
  };
  std::unique_ptr<std::byte, release> memory_;
  std::size_t capacity_ = 0;
  int calls_without_large_ = 0;
};

template <class Request>
struct executor_workspace {
  struct active_op {
    op_id id;
    Request req;
  };

  std::vector<std::uint32_t> waiting;          // by op: dependencies not finished yet
  std::vector<op_id> ready;                    // ops whose dependencies are done, in the order they became so
  std::vector<active_op> active;               // posted requests not finished yet (messages, charged local steps)
  std::vector<std::uint32_t> listed;           // places in `active` the transport listed as finished (lists_finished_requests)
  std::vector<std::uint32_t> vacant;           // places in `active` whose request finished, where it keeps places
  std::vector<fused_target> fused;             // fused receives point into it: sized before the first one
  static constexpr op_id vacated = ~op_id{};   // the op of a vacant place
  reusable_host_memory scratch, staging;
  // The parts and results of a reduction at owners (detail/accumulated_call.hpp), kept
  // between calls whatever their size: a training step repeats the same large call.
  reusable_host_memory accumulators;

  template <class Vector>
  static void release(Vector& v) {
    v.clear();
    v.shrink_to_fit();
  }

  // After a call: what a plan of many operations needed (a ring of a large group) is
  // given back, and a large scratch buffer once calls stop needing it, so that an idle
  // rank holds little.
  void trim() {
    constexpr std::size_t kept_ops = 256;
    if (waiting.capacity() > kept_ops) {
      release(waiting);
      release(ready);
      release(active);
      release(listed);
      release(vacant);
      release(fused);
    }
    scratch.trim();
    staging.trim();
  }
};

}  // namespace collectives
