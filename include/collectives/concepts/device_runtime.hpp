// The DeviceRuntime concept: what transport/device_ipc.hpp needs of a device, one
// object per rank, owned by the transport. device/cuda_runtime.hpp models it on CUDA;
// the tests model it with host memory standing in for a device.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>
#include <type_traits>

#include "../memory_space.hpp"

namespace collectives {

template <class R>
concept device_runtime = std::move_constructible<R> &&
    requires(R& rt, const R& crt, typename R::handle& out, const typename R::handle& h, typename R::marker& m,
             void* p, const void* cp, std::size_t bytes, int local_rank) {
  typename R::memory_space;  // the space of the buffers it moves
  // Names an exported block to another process; it travels as bytes.
  typename R::handle;
  requires std::is_trivially_copyable_v<typename R::handle> && std::default_initializable<typename R::handle>;
  // A point in the stream's work.
  typename R::marker;
  requires std::default_initializable<typename R::marker>;
  // The device this local rank of a host uses.
  { R::for_local_rank(local_rank) } -> std::same_as<R>;
  // A block other processes may map, and a peer's block mapped here.
  { rt.allocate_exported(bytes, out) } -> std::same_as<void*>;
  { rt.free_exported(p) } noexcept;
  { rt.open(h) } -> std::same_as<void*>;
  { rt.close(p) } noexcept;
  // Private device memory.
  { rt.allocate(bytes) } -> std::same_as<void*>;
  { rt.free(p) } noexcept;
  // Enqueued on the stream; done once a marker made after it is reached.
  rt.copy(p, cp, bytes);
  { rt.mark() } -> std::same_as<typename R::marker>;
  { rt.reached(m) } -> std::same_as<bool>;
  { rt.forget(m) } noexcept;
  // Waits for everything enqueued (a cancel must not leave a copy running).
  { rt.synchronize() } noexcept;
  // The local steps, on the same stream. Compared through decltype, so memory_ops of
  // the space may still be incomplete where the transport is only named.
  requires std::same_as<decltype(crt.memory_operations()), memory_ops<typename R::memory_space>>;
  { crt.describe() } -> std::same_as<std::string>;
};

// Names what a model of device_runtime lacks.
template <class R>
constexpr bool check_device_runtime() {
  static_assert(std::move_constructible<R>, "collectives: a device runtime must be move-constructible");
  static_assert(requires { typename R::memory_space; }, "collectives: a device runtime must define `memory_space`");
  static_assert(requires { typename R::handle; } && std::is_trivially_copyable_v<typename R::handle>,
                "collectives: a device runtime must define a trivially copyable `handle` (it travels as bytes)");
  static_assert(requires { typename R::marker; }, "collectives: a device runtime must define a `marker` type");
  static_assert(requires(int local_rank) { { R::for_local_rank(local_rank) } -> std::same_as<R>; },
                "collectives: a device runtime must provide `static R for_local_rank(int)`");
  static_assert(requires(R& rt, typename R::handle& out, std::size_t n) { { rt.allocate_exported(n, out) } -> std::same_as<void*>; },
                "collectives: a device runtime must provide `void* allocate_exported(std::size_t, handle&)`");
  static_assert(requires(R& rt, void* p) { { rt.free_exported(p) } noexcept; },
                "collectives: a device runtime must provide `void free_exported(void*) noexcept`");
  static_assert(requires(R& rt, const typename R::handle& h) { { rt.open(h) } -> std::same_as<void*>; },
                "collectives: a device runtime must provide `void* open(const handle&)`");
  static_assert(requires(R& rt, void* p) { { rt.close(p) } noexcept; },
                "collectives: a device runtime must provide `void close(void*) noexcept`");
  static_assert(requires(R& rt, std::size_t n) { { rt.allocate(n) } -> std::same_as<void*>; },
                "collectives: a device runtime must provide `void* allocate(std::size_t)`");
  static_assert(requires(R& rt, void* p) { { rt.free(p) } noexcept; },
                "collectives: a device runtime must provide `void free(void*) noexcept`");
  static_assert(requires(R& rt, void* p, const void* cp, std::size_t n) { rt.copy(p, cp, n); },
                "collectives: a device runtime must provide `void copy(void* dst, const void* src, std::size_t)`");
  static_assert(requires(R& rt) { { rt.mark() } -> std::same_as<typename R::marker>; },
                "collectives: a device runtime must provide `marker mark()`");
  static_assert(requires(R& rt, typename R::marker& m) { { rt.reached(m) } -> std::same_as<bool>; },
                "collectives: a device runtime must provide `bool reached(marker&)`");
  static_assert(requires(R& rt, typename R::marker& m) { { rt.forget(m) } noexcept; },
                "collectives: a device runtime must provide `void forget(marker&) noexcept`");
  static_assert(requires(R& rt) { { rt.synchronize() } noexcept; },
                "collectives: a device runtime must provide `void synchronize() noexcept`");
  static_assert(requires(const R& rt) {
                  requires std::same_as<decltype(rt.memory_operations()), memory_ops<typename R::memory_space>>;
                },
                "collectives: a device runtime must provide `memory_ops<memory_space> memory_operations() const`");
  static_assert(requires(const R& rt) { { rt.describe() } -> std::same_as<std::string>; },
                "collectives: a device runtime must provide `std::string describe() const`");
  return device_runtime<R>;
}

}  // namespace collectives
