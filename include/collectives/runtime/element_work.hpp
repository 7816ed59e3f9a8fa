// What a call does to its elements, behind one small table: the local steps over
// regions of elements, where the call's scratch memory comes from, and how its
// buffers' memory space is moved. The executor's core (executor_core.hpp) walks a
// schedule through it, so the core is compiled once per transport, while the table
// (typed_element_work) is compiled per element type, op and memory space, with the
// user's op inlined in its loops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "../concepts/reduce_op.hpp"
#include "../concepts/vocabulary.hpp"
#include "../config.hpp"
#include "../memory_space.hpp"
#include "../ops/host_reduce.hpp"
#include "workspace.hpp"

namespace collectives {

// Stands in for an op where a schedule combines nothing (broadcast, gather, ...). Its
// element work only copies: no combining loop, and on the device no kernel.
struct no_reduce {
  static constexpr bool commutative = true;
  template <class T>
  COLLECTIVES_HOST_DEVICE T operator()(const T& a, const T&) const { return a; }
};

namespace detail {

// A fused receive's sink that keeps the first operand, as no_reduce does: the
// received bytes replace the target's when they come first.
inline void keep_first(void* target, std::size_t offset, std::span<const std::byte> piece) {
  const auto& t = *static_cast<const fused_target*>(target);
  const std::byte* first = t.order == operand_order::received_first ? piece.data()
                           : t.base && t.base != t.dst           ? static_cast<const std::byte*>(t.base) + offset
                                                                  : nullptr;
  if (first) std::memcpy(static_cast<std::byte*>(t.dst) + offset, first, piece.size());
}

// Reduces a piece of a fused receive into its target, with the target's types restored.
template <class T, class Op>
void reduce_piece(const fused_target& t, Op& op, std::size_t offset, std::span<const std::byte> piece) {
  T* dst = static_cast<T*>(t.dst) + offset / sizeof(T);
  const std::size_t n = piece.size() / sizeof(T);
  // Onto a base: its piece first, while the received one waits in cache.
  if (t.base && t.base != t.dst) memory_ops<host_memory>::copy(dst, static_cast<const T*>(t.base) + offset / sizeof(T), n);
  if (reinterpret_cast<std::uintptr_t>(piece.data()) % alignof(T) == 0) {
    memory_ops<host_memory>::combine(dst, reinterpret_cast<const T*>(piece.data()), n, op, t.order);
    return;
  }
  // A transport's read buffer need not be aligned for T (tcp's payloads follow frame
  // headers), and reading a T there is undefined behaviour (UBSan reports it): such a
  // piece goes through an aligned buffer on the stack, a few KiB at a time.
  constexpr std::size_t room = sizeof(T) < 4096 ? 4096 / sizeof(T) : 1;
  alignas(T) std::byte aligned[room * sizeof(T)];
  for (std::size_t done = 0; done < n; done += room) {
    const std::size_t k = n - done < room ? n - done : room;
    std::memcpy(aligned, piece.data() + done * sizeof(T), k * sizeof(T));
    memory_ops<host_memory>::combine(dst + done, reinterpret_cast<const T*>(aligned), k, op, t.order);
  }
}

template <class T, class Op>
void reduce_into(void* target, std::size_t offset, std::span<const std::byte> piece) {
  const auto& t = *static_cast<const fused_target*>(target);
  reduce_piece<T>(t, *static_cast<Op*>(t.op), offset, piece);
}

}  // namespace detail

// The element work of one call. Counts are in elements, addresses in bytes.
class element_work {
 public:
  enum class room { scratch, staging };

  element_work(std::size_t bytes_each, bool on_device, bool has_finalize_step) noexcept
      : element_size(bytes_each), device(on_device), finalizes(has_finalize_step) {}
  element_work(const element_work&) = delete;
  element_work& operator=(const element_work&) = delete;

  virtual void copy(std::byte* dst, const std::byte* src, std::size_t count) = 0;
  virtual void combine(std::byte* dst, const std::byte* received, std::size_t count, operand_order order) = 0;
  virtual void finalize(std::byte* dst, std::size_t count, int nranks) = 0;  // called only if `finalizes`
  // Room for `count` elements until the call ends (host scratch reuses `reusable`).
  virtual std::byte* memory(room which, std::size_t count, reusable_host_memory& reusable) = 0;
  // Device steps are only enqueued: waits until they have run.
  virtual void synchronize(deadline until) = 0;
  // A fused receive's sink over a fused_target whose `op` is op_address().
  virtual chunk_sink::consume_function fused_reduce() const noexcept = 0;
  virtual void* op_address() noexcept = 0;

  const std::size_t element_size;
  const bool device;     // the buffers are device memory: messages go as such, no fused receive
  const bool finalizes;  // the op has a finalize step

 protected:
  ~element_work() = default;
};

// The table for elements of T, reduced by Op, in buffers of Space.
template <class T, class Op, class Space>
class typed_element_work final : public element_work {
  using owned_memory = decltype(std::declval<memory_ops<Space>&>().template allocate<T>(0));

 public:
  typed_element_work(memory_ops<Space> memory, Op& op)
      : element_work(sizeof(T), !std::is_same_v<Space, host_memory>, has_finalize<Op, T>), memory_(memory), op_(op) {}

  void copy(std::byte* dst, const std::byte* src, std::size_t count) override {
    memory_.copy(typed(dst), typed(src), count);
  }
  void combine(std::byte* dst, const std::byte* received, std::size_t count, operand_order order) override {
    if constexpr (only_moves) {
      if (order == operand_order::received_first) copy(dst, received, count);
    } else {
      memory_.combine(typed(dst), typed(received), count, op_, order);
    }
  }
  void finalize(std::byte* dst, std::size_t count, int nranks) override {
    if constexpr (has_finalize<Op, T>) memory_.finalize(typed(dst), count, op_, nranks);
  }
  std::byte* memory(room which, std::size_t count, reusable_host_memory& reusable) override {
    if (count == 0) return nullptr;
    if constexpr (reuses_memory) return reusable.get(count * sizeof(T));
    owned_memory& owned = which == room::scratch ? scratch_ : staging_;
    owned = memory_.template allocate<T>(count);
    return reinterpret_cast<std::byte*>(owned.get());
  }
  void synchronize(deadline until) override {
    if constexpr (requires { memory_.synchronize(until); }) memory_.synchronize(until);
  }
  chunk_sink::consume_function fused_reduce() const noexcept override {
    if constexpr (only_moves) return &detail::keep_first;
    else return &detail::reduce_into<T, Op>;
  }
  void* op_address() noexcept override { return &op_; }

 private:
  static constexpr bool only_moves = std::is_same_v<Op, no_reduce>;
  // Host scratch and staging come from the workspace; other memory spaces allocate
  // their own per call.
  static constexpr bool reuses_memory =
      std::is_same_v<Space, host_memory> && alignof(T) <= reusable_host_memory::alignment;

  static T* typed(std::byte* p) noexcept { return reinterpret_cast<T*>(p); }
  static const T* typed(const std::byte* p) noexcept { return reinterpret_cast<const T*>(p); }

  memory_ops<Space> memory_;
  Op& op_;
  owned_memory scratch_{}, staging_{};
};

// Elements of `element_size` bytes that are only moved, never combined: the work of
// the library's own exchanges (the call check, the hosts, the link figures). A reduce
// step, should a plan have one, keeps its first operand, as no_reduce does.
class moved_bytes_work final : public element_work {
 public:
  explicit moved_bytes_work(std::size_t bytes_each) noexcept : element_work(bytes_each, false, false) {}

  void copy(std::byte* dst, const std::byte* src, std::size_t count) override {
    if (count != 0 && dst != src) std::memcpy(dst, src, count * element_size);
  }
  void combine(std::byte* dst, const std::byte* received, std::size_t count, operand_order order) override {
    if (order == operand_order::received_first) copy(dst, received, count);
  }
  void finalize(std::byte*, std::size_t, int) override {}
  std::byte* memory(room, std::size_t count, reusable_host_memory& reusable) override {
    return count == 0 ? nullptr : reusable.get(count * element_size);
  }
  void synchronize(deadline) override {}
  chunk_sink::consume_function fused_reduce() const noexcept override { return &detail::keep_first; }
  void* op_address() noexcept override { return nullptr; }
};

}  // namespace collectives
