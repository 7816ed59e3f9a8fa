// What a program may set for the shm transport, apart from the transport, so that
// automatic_transport's options name it without bringing the engine.
#pragma once

#include <chrono>
#include <cstddef>

#include "../../settings.hpp"
#include "../detail/matching.hpp"

namespace collectives {
namespace shm_detail {

struct engine_limits {
  transport_detail::early_limits early{};        // messages kept before their receive is posted
  std::chrono::microseconds poll_time{50};       // poll this long before sleeping,
  std::chrono::microseconds oversubscribed_poll_time{2000};  // or this long, when ranks outnumber the cores
  unsigned spin_turns = 64;                      // turns before an unbound rank yields
  std::chrono::milliseconds watch_interval{5};   // how often a waiting rank checks its peers live
  // Messages this large are read from the sender's memory (one_copy.hpp); 0: never, the
  // default, as on the machines measured the FIFO's two copies through cache beat the
  // kernel's one (docs/shm.md).
  std::size_t one_copy_bytes = 0;
};

}  // namespace shm_detail

struct shm_options {
  // Each FIFO holds `slots` fragments of up to `slot_bytes`: the pipelining chunk. The
  // segment takes about size * (size - 1) * slots * slot_bytes bytes of /dev/shm.
  std::size_t slot_bytes = 64 * 1024;
  std::size_t slots = 8;
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{60}};
  shm_detail::engine_limits limits{};

  // COLLECTIVES_STARTUP_TIMEOUT (seconds), COLLECTIVES_SHM_SLOT_BYTES, COLLECTIVES_SHM_SLOTS,
  // COLLECTIVES_SHM_POLL_US (how long a wait polls before it sleeps, however many cores),
  // COLLECTIVES_SHM_ONE_COPY_BYTES (messages from this size on are read straight from
  // the sender's memory; 0, the default, never).
  static shm_options from_env() {
    shm_options o;
    if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
    if (auto b = settings::byte_size("COLLECTIVES_SHM_SLOT_BYTES")) o.slot_bytes = *b;
    if (auto n = settings::whole_number("COLLECTIVES_SHM_SLOTS")) o.slots = static_cast<std::size_t>(*n);
    if (auto us = settings::whole_number("COLLECTIVES_SHM_POLL_US"))
      o.limits.poll_time = o.limits.oversubscribed_poll_time = std::chrono::microseconds{*us};
    if (auto b = settings::byte_size("COLLECTIVES_SHM_ONE_COPY_BYTES")) o.limits.one_copy_bytes = *b;
    return o;
  }
};

}  // namespace collectives
