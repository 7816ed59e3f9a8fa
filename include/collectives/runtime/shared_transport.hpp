// What the communicators of one rank on one transport share: the communicator made
// from the transport and every group split from it (split.hpp) send through the
// same connections, so they also share one progress thread, and group numbers that
// keep their messages apart.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "in_flight.hpp"
#include "progress_thread.hpp"

namespace collectives {

template <class Transport>
struct shared_transport {
  explicit shared_transport(Transport t) : transport(std::move(t)) {}

  Transport transport;

  // The lowest group number this rank has not used yet (0 is the whole job's). A
  // new group takes the highest of its members' numbers, so two groups that share a
  // rank never share a number (transport/subgroup.hpp).
  std::uint32_t next_group_number = 1;

  // The calls in flight of every communicator on the transport: a blocking call and
  // the progress thread advance them all, so no communicator's call waits on another's.
  std::vector<in_flight_calls*> calls_in_flight;

  // Advances every communicator's calls in flight once; true when any moved.
  bool progress_all(handover_request handover = {}) {
    bool moved = false;
    for (auto* calls : calls_in_flight) moved |= calls->progress(handover);
    return moved;
  }
  // A progress thread's round, or a handle's test: advance, look for messages,
  // advance until nothing moves or `handover` is raised. One look for all: it takes
  // the transport's wake-up, which a call of any of the communicators may be waiting for.
  bool poll_all(handover_request handover = {}) {
    bool moved = progress_all(handover);
    const auto busy = std::find_if(calls_in_flight.begin(), calls_in_flight.end(), [](auto* c) { return !c->empty(); });
    if (busy != calls_in_flight.end()) moved |= (*busy)->look_for_messages();
    while (!handover.raised() && progress_all(handover)) moved = true;
    return moved;
  }
  bool nothing_in_flight() const {
    return std::all_of(calls_in_flight.begin(), calls_in_flight.end(), [](auto* c) { return c->empty(); });
  }

  // At most one per transport, whichever communicator started it; last, so that it
  // stops before what it reads goes.
  std::unique_ptr<progress_thread> progress;
};

}  // namespace collectives
