// The Transport concept: moves byte ranges between the ranks of one group.
// Requirements are tabled in docs/concepts/transport.md.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "../memory_space.hpp"
#include "vocabulary.hpp"

namespace collectives {

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

// Optional capability: the transport lists a request when it finishes (done or
// failed): watch(r, list, key) appends `key` to `*list` then, or at once if r has
// finished already, until r is tested or cancelled. A caller with many requests posted
// (a ring's receives on a simulated cluster of thousands of ranks) then tests only
// those listed instead of every one after each event.
template <class T>
concept lists_finished_requests = transport<T> &&
    requires(T& t, typename T::request& r, std::vector<std::uint32_t>* list, std::uint32_t key) {
      { t.watch(r, list, key) } noexcept;
    };

// Optional capability: the transport's clock charges a rank's local steps (a
// simulated cluster's model of its core): post_local_step(step, bytes) is posted once
// the step has run and finishes when its cost has passed; no request where the step
// costs nothing. Other transports' local steps are done once they have run.
template <class T>
concept charges_local_steps = transport<T> && requires(T& t, local_step step, std::size_t bytes) {
  { t.post_local_step(step, bytes) } -> std::same_as<std::optional<typename T::request>>;
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

// The time a transport's calls are measured by: steady_clock's, unless the transport
// keeps its own as `deadline now() const` (a simulated transport's virtual time, a
// test's clock). A call's deadline is taken from it and compared with it.
template <class T>
deadline now_of(const T& t) {
  if constexpr (requires { { t.now() } -> std::same_as<deadline>; }) return t.now();
  else return clock::now();
}

// What the concept leaves open, declared by each transport as
// `static constexpr transport_traits traits` and read through traits_of<T>(). The
// defaults promise the least, so a transport that declares nothing is taken at its
// weakest. Code (and the conformance suite) reads these instead of transport names.
enum class send_completion : std::uint8_t {
  at_delivery,    // a send completes once its receiver has taken the message (rendezvous)
  when_buffered,  // a small send completes before its receive is posted
};

enum class cancel_mid_transfer : std::uint8_t {
  unspecified,   // later messages between the pair may stall until their deadline
  link_fails,    // the cancelling rank's later operations with that peer throw errc::protocol_error
  link_goes_on,  // later messages between the pair move as usual
};

struct transport_traits {
  send_completion sends = send_completion::at_delivery;
  bool fifo_equal_tags = false;             // messages with one (peer, tag) match in the order sent
  std::size_t early_message_bytes = 0;      // an unexpected message this small is taken in on arrival
  bool large_early_message_blocks_peer = true;  // a larger one waits in the link, the peer's later ones behind it
  bool sender_sees_size_refusal = false;    // a send whose receive refused its size fails (buffer_size_mismatch)
  cancel_mid_transfer cancel_halfway = cancel_mid_transfer::unspecified;
  bool reports_departed_peer = false;       // a peer that destroys its transport: errc::peer_lost
  bool ranks_can_be_processes = false;      // so one can die; its peers then get errc::peer_lost
  bool one_host = false;                    // every rank runs on one host (no exchange tells which)
};

template <class T>
constexpr transport_traits traits_of() {
  if constexpr (requires { { T::traits } -> std::convertible_to<transport_traits>; }) return T::traits;
  else return transport_traits{};
}

// Each rank's host (0, 1, ... numbered in the order of their first ranks), where the
// transport knows them: all one host by its traits, or as `std::vector<int> hosts()
// const` (empty where it does not know). Empty
// otherwise, and a call that plans by hosts asks the ranks once (detail/hosts.hpp).
template <class T>
std::vector<int> hosts_known_to(const T& t) {
  if constexpr (traits_of<T>().one_host) return std::vector<int>(static_cast<std::size_t>(t.size()), 0);
  else if constexpr (requires { { t.hosts() } -> std::same_as<std::vector<int>>; }) return t.hosts();
  else return {};
}

template <class T>
constexpr bool check_defined_transport() {
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

// Names what a model of transport lacks.
template <class T>
constexpr bool check_transport() {
  // A transport of the library's that is only declared: its header is missing.
  static_assert(requires { sizeof(T); },
                "collectives: this transport is declared but not defined: include its header: "
                "<collectives/transport/shm.hpp> for shm, <collectives/transport/tcp.hpp> for tcp, "
                "<collectives/transport/automatic.hpp> for automatic_transport, "
                "<collectives/transport/cuda_ipc.hpp> for cuda_ipc");
  if constexpr (!requires { sizeof(T); }) {
    return false;  // the rest would only repeat it
  } else {
    return check_defined_transport<T>();
  }
}

}  // namespace collectives
