// A request to hand the transport over: raised while another thread waits for it (a
// progress thread's owner, progress_thread.hpp). Whatever advances calls looks at it
// between its passes over their operations and returns early once it is raised, so
// that a large call's messages, which move for as long as the peers keep up, cannot
// keep the waiting thread out for the whole call.
#pragma once

#include <atomic>

namespace collectives {

struct handover_request {
  const std::atomic<int>* waiting = nullptr;  // none: never raised
  bool raised() const noexcept { return waiting && waiting->load(std::memory_order_relaxed) > 0; }
};

}  // namespace collectives
