// send / recv: one message between two ranks, outside any collective. Messages
// between the same pair with the same tag arrive in the order they were sent.
#pragma once

#include <cstdint>
#include <ranges>
#include <string>

#include "algorithm/schedule.hpp"
#include "detail/call.hpp"

namespace collectives {

namespace detail {

inline void check_peer(const char* call, int peer, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank)
    throw error(errc::invalid_peer, std::string(call) + ": peer " + std::to_string(peer) +
                                        " is not another rank of a communicator of size " + std::to_string(size));
}

// Point-to-point messages use a call number of their own, which no collective call takes.
template <class Space, transport Tr, class T>
void run_message(communicator<Tr>& comm, const char* call, const operation& message, const T* input, T* output) {
  static_assert(std::is_trivially_copyable_v<T>,
                "collectives: the element type must be trivially copyable (it travels as bytes)");
  schedule plan;
  plan.add(message);
  no_reduce op;
  run_plan<Space>(comm, std::make_shared<const compact_plan>(plan, comm.rank(), comm.size()), call_context::starting_at(comm.now(), call, reserved_call::point_to_point, comm.timeout()), input, output, op);
}

}  // namespace detail

// Blocks until `peer` has taken the message (or the deadline passes).
template <transport Tr, buffer Data>
void send(communicator<Tr>& comm, const Data& data, int peer, std::uint32_t tag = 0) {
  using T = element_of<Data>;
  detail::check_peer("send", peer, comm.rank(), comm.size());
  const region all{buffer_id::input, 0, std::ranges::size(data)};
  detail::run_message<memory_space_of<Data>>(comm, "send", {.kind = op_kind::send, .peer = peer, .tag = tag, .src = all},
                                             std::ranges::data(data), static_cast<T*>(nullptr));
}

// Blocks until the message from `peer` has arrived in `data`, which must be exactly
// the size sent.
template <transport Tr, writable_buffer Data>
void recv(communicator<Tr>& comm, Data&& data, int peer, std::uint32_t tag = 0) {
  using T = element_of<Data>;
  detail::check_peer("recv", peer, comm.rank(), comm.size());
  const region all{buffer_id::output, 0, std::ranges::size(data)};
  detail::run_message<memory_space_of<Data>>(comm, "recv", {.kind = op_kind::recv, .peer = peer, .tag = tag, .dst = all},
                                             static_cast<const T*>(nullptr), std::ranges::data(data));
}

}  // namespace collectives
