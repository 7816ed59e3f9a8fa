// The words every layer shares: time, message tags, the call numbers the library
// keeps for itself, the chunk sink of fused receives and the link cost model. Plain
// standard C++, so that anything may include it without climbing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

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

// Call numbers no collective takes: collectives count up from 1 (communicator::next_call),
// so the library keeps 0 and the top of the range for messages outside any collective.
namespace reserved_call {
inline constexpr std::uint64_t point_to_point = 0;  // send / recv
// device_ipc's notices: this bit set, the notice's sequence number in the rest.
inline constexpr std::uint64_t device_notices = std::uint64_t(1) << 63;
inline constexpr std::uint64_t device_handles = device_notices - 1;  // device_ipc's inbox handles
inline constexpr std::uint64_t tcp_hello = UINT64_MAX;  // tcp's first message to every peer
inline constexpr std::uint64_t rdma_hello = UINT64_MAX - 1;  // rdma's
}  // namespace reserved_call

// Consumer of a message that a transport reduces "on the wire": called with pieces
// of the message in order, each a whole number of `granule` bytes, `offset` bytes
// into the message. A plain pointer and function, so posting it allocates nothing.
struct chunk_sink {
  using consume_function = void (*)(void* context, std::size_t offset, std::span<const std::byte> piece);
  void* context = nullptr;
  consume_function consume = nullptr;
  void operator()(std::size_t offset, std::span<const std::byte> piece) const { consume(context, offset, piece); }
};

// A step a rank runs on its own buffers (a transport that charges them:
// charges_local_steps).
enum class local_step : std::uint8_t { copy, reduce };

// Figures an automatic algorithm choice uses (alpha-beta model); a transport may
// publish its own as `static constexpr link_costs costs`, or, when they depend on
// what it chose at run time, as `link_costs current_costs() const`.
struct link_costs {
  double latency_s = 5e-6;               // one message's start-up on the critical path
  double per_message_s = 1e-6;           // extra cost of each concurrent message
  double seconds_per_byte = 1.0 / 5e9;   // moving a byte between two ranks
  double reduce_seconds_per_byte = 1.0 / 10e9;  // combining a received byte
  // Moving a byte of a call whose buffers are far larger than the caches (32 MiB and
  // up), as COLLECTIVES_TUNE measures it; 0: as seconds_per_byte. The simulator's
  // measured model uses it; automatic's estimates do not yet.
  double memory_seconds_per_byte = 0;
  // The buffers COLLECTIVES_TUNE streams through for it, and from which size on the
  // simulator charges it in full.
  static constexpr std::size_t memory_figure_bytes = std::size_t(32) << 20;
  // A local copy of a byte within the caches, as COLLECTIVES_TUNE measures it; 0: not
  // measured. The simulator's measured model charges a call's local copies by it.
  double copy_seconds_per_byte = 0;
  // Moving a byte of a call whose buffers are 4 MiB, between the core's caches and
  // memory (where a host's last-level cache may still hold them), as COLLECTIVES_TUNE
  // measures it; 0: not measured. The simulator's measured model uses it.
  double middle_seconds_per_byte = 0;
  static constexpr std::size_t middle_figure_bytes = std::size_t(4) << 20;
};

// The figures of each class of link a job has: between two ranks of one host, and
// between ranks on different hosts (the transport's defaults, or measured:
// docs/tuning.md).
struct link_classes {
  link_costs on_host{};
  link_costs across_hosts{};
};

constexpr bool same_figures(const link_costs& a, const link_costs& b) {
  return a.latency_s == b.latency_s && a.per_message_s == b.per_message_s && a.seconds_per_byte == b.seconds_per_byte &&
         a.reduce_seconds_per_byte == b.reduce_seconds_per_byte && a.memory_seconds_per_byte == b.memory_seconds_per_byte &&
         a.copy_seconds_per_byte == b.copy_seconds_per_byte && a.middle_seconds_per_byte == b.middle_seconds_per_byte;
}

}  // namespace collectives
