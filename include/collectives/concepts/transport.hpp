// The Transport concept: moves byte ranges between the ranks of one group.
// Requirements are tabled in docs/concepts/transport.md.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../memory_space.hpp"

namespace collectives {

using clock = std::chrono::steady_clock;
using deadline = clock::time_point;

// Identifies one message between two ranks: the communicator's call number and the
// schedule's tag for the message within that call. Messages match on (peer, tag).
struct message_tag {
  std::uint64_t call = 0;
  std::uint32_t step = 0;
  friend bool operator==(const message_tag&, const message_tag&) = default;
};

// Consumer of a message that a transport reduces "on the wire": called with pieces
// of the message in order, each a whole number of `granule` bytes, `offset` bytes
// into the message. A plain pointer and function, so posting it allocates nothing.
struct chunk_sink {
  void* context = nullptr;
  void (*consume)(void* context, std::size_t offset, std::span<const std::byte> piece) = nullptr;
  void operator()(std::size_t offset, std::span<const std::byte> piece) const { consume(context, offset, piece); }
};

// Figures an automatic algorithm choice uses (alpha-beta model); a transport may
// publish its own as `static constexpr link_costs costs`, or, when they depend on
// what it chose at run time, as `link_costs current_costs() const`.
struct link_costs {
  double latency_s = 5e-6;               // one message's start-up on the critical path
  double per_message_s = 1e-6;           // extra cost of each concurrent message
  double seconds_per_byte = 1.0 / 5e9;   // moving a byte between two ranks
  double reduce_seconds_per_byte = 1.0 / 10e9;  // combining a received byte
};

template <class T>
concept transport = std::movable<T> &&
    requires(T& t, const T& ct, int peer, message_tag tag, std::span<const std::byte> out,
             std::span<std::byte> in, typename T::request& req, deadline until) {
  typename T::request;
  { ct.rank() } -> std::same_as<int>;
  { ct.size() } -> std::same_as<int>;
  // Start moving bytes; both return at once. `out` and `in` stay owned by the caller
  // and must stay valid until the request completes or is cancelled.
  { t.post_send(peer, tag, out) } -> std::same_as<typename T::request>;
  { t.post_recv(peer, tag, in) } -> std::same_as<typename T::request>;
  // Make progress; true once the request has completed (it is then released). Throws
  // collectives::error on failure: size mismatch, peer lost, aborted.
  { t.test(req) } -> std::same_as<bool>;
  // Block until some request may have progressed (true) or `until` passes (false).
  // Never loses a wake-up that happened since the previous call.
  { t.wait_for_activity(until) } -> std::same_as<bool>;
  // Give up a request; once it returns, the request's buffer is no longer touched.
  { t.cancel(req) } noexcept;
  // Wake every pending operation of every rank of the group with errc::aborted.
  { t.abort() };
};

// Optional capability: reduce a message while receiving it, with no landing copy.
template <class T>
concept fused_recv_reduce_transport = transport<T> &&
    requires(T& t, int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
  { t.post_recv_reduce(peer, tag, bytes, granule, sink) } -> std::same_as<typename T::request>;
};

// Optional capability: messages between buffers of another memory space (device
// memory), posted with the space as a tag: post_send(peer, tag, out, Space{}) and
// post_recv(peer, tag, in, Space{}). Every transport moves host memory.
template <class T, class Space>
concept moves_memory_of = std::is_same_v<Space, host_memory> ||
    requires(T& t, int peer, message_tag tag, std::span<const std::byte> out, std::span<std::byte> in) {
      { t.post_send(peer, tag, out, Space{}) } -> std::same_as<typename T::request>;
      { t.post_recv(peer, tag, in, Space{}) } -> std::same_as<typename T::request>;
    };

template <class T>
constexpr link_costs costs_of() {
  if constexpr (requires { T::costs; }) return T::costs;
  else return link_costs{};
}

// The figures for one transport object: a transport that picks its link at run time
// (automatic_transport: shm or tcp) says which through `link_costs current_costs() const`;
// any other is described by its type.
template <class T>
link_costs costs_of(const T& t) {
  if constexpr (requires { { t.current_costs() } -> std::same_as<link_costs>; }) return t.current_costs();
  else return costs_of<T>();
}

// Names what a model of transport lacks.
template <class T>
constexpr bool check_transport() {
  static_assert(requires { typename T::request; }, "collectives: a transport must define a nested `request` type");
  static_assert(requires(const T& t) { { t.rank() } -> std::same_as<int>; }, "collectives: a transport must provide `int rank() const`");
  static_assert(requires(const T& t) { { t.size() } -> std::same_as<int>; }, "collectives: a transport must provide `int size() const`");
  static_assert(requires(T& t, std::span<const std::byte> b) { t.post_send(0, message_tag{}, b); },
                "collectives: a transport must provide `request post_send(int peer, message_tag, std::span<const std::byte>)`");
  static_assert(requires(T& t, std::span<std::byte> b) { t.post_recv(0, message_tag{}, b); },
                "collectives: a transport must provide `request post_recv(int peer, message_tag, std::span<std::byte>)`");
  static_assert(requires(T& t, typename T::request& r) { { t.test(r) } -> std::same_as<bool>; },
                "collectives: a transport must provide `bool test(request&)`");
  static_assert(requires(T& t, deadline d) { { t.wait_for_activity(d) } -> std::same_as<bool>; },
                "collectives: a transport must provide `bool wait_for_activity(deadline)`");
  static_assert(requires(T& t, typename T::request& r) { { t.cancel(r) } noexcept; },
                "collectives: a transport must provide `void cancel(request&) noexcept`");
  static_assert(requires(T& t) { t.abort(); }, "collectives: a transport must provide `void abort()`");
  return transport<T>;
}

}  // namespace collectives
