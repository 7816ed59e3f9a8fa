// How device_ipc sizes its inboxes and how much of the device messages that come
// before their receive it keeps.
#pragma once

#include <cstddef>

#include "../../settings.hpp"
#include "../detail/matching.hpp"

namespace collectives {

struct device_ipc_options {
  // Each rank's inbox has `slots` slots of `slot_bytes` for each sender: a message
  // moves a slot at a time, so this is the pipelining chunk.
  std::size_t slot_bytes = std::size_t(1) << 20;
  std::size_t slots = 4;
  // A device message that comes before its receive is copied out of the inbox into
  // device memory if it is this small and its sender's early messages fit the budget,
  // so that its slots go back at once; a larger one waits in the inbox (and its
  // sender's later messages behind it) until its receive is posted.
  transport_detail::early_limits early{.message_bytes = std::size_t(1) << 20, .bytes_per_peer = std::size_t(16) << 20};

  // COLLECTIVES_DEVICE_SLOT_BYTES, COLLECTIVES_DEVICE_SLOTS.
  static device_ipc_options from_env() {
    device_ipc_options o;
    if (auto b = settings::byte_size("COLLECTIVES_DEVICE_SLOT_BYTES")) o.slot_bytes = *b;
    if (auto n = settings::whole_number("COLLECTIVES_DEVICE_SLOTS")) o.slots = static_cast<std::size_t>(*n);
    return o;
  }
};

}  // namespace collectives
