// The one executor: runs any schedule on any transport, for any element type, op
// and memory space. It is the core (executor_core.hpp), compiled once per transport,
// over the element work of (T, Op, Space) (element_work.hpp), in which the user's op
// is inlined.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>

#include "../concepts/schedule.hpp"
#include "../concepts/transport.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../memory_space.hpp"
#include "element_work.hpp"
#include "executor_core.hpp"
#include "workspace.hpp"

namespace collectives {

// The caller's buffers for one call; both hold elements of T in memory space Space.
template <class T, class Space = host_memory>
struct call_buffers {
  const T* input = nullptr;
  T* output = nullptr;
};

// What a blocking call advances besides itself when nothing else is in flight.
struct nothing_else {
  constexpr bool operator()() const noexcept { return false; }
};

// The local steps' implementation for buffers in Space: the transport's, when it
// keeps device state for them (a stream), else a default-constructed memory_ops.
template <class Space, class Transport>
memory_ops<Space> memory_ops_of(Transport& transport) {
  if constexpr (requires { { transport.memory_operations(Space{}) } -> std::same_as<memory_ops<Space>>; })
    return transport.memory_operations(Space{});
  else
    return {};
}

// Buffers in Space need a transport that moves such memory.
template <class Transport, class Space>
constexpr bool check_moves_memory() {
  static_assert(moves_memory_of<Transport, Space>,
                "collectives: this transport moves host memory only; device buffers need a transport that moves "
                "device memory (cuda_ipc)");
  return true;
}

template <transport Transport, class T, class Op, class Space = host_memory>
class executor {
  static_assert(check_moves_memory<Transport, Space>());

 public:
  using workspace = executor_workspace<typename Transport::request>;

  executor(const schedule& plan, Transport& transport, call_buffers<T, Space> buffers, Op& op, workspace& room)
      : plan_(plan, transport.rank(), transport.size()), work_(memory_ops_of<Space>(transport), op),
        core_(plan_, transport, buffers.input, buffers.output, work_, room) {}
  executor(const executor&) = delete;  // it stays where it started: its core points at its work
  executor& operator=(const executor&) = delete;

  // Runs the call to its end on this thread. `others` advances whatever else is in
  // flight on the same transport (a communicator's non-blocking calls) between steps,
  // so that a blocking call never waits on messages that only they would take in.
  template <class Others = nothing_else>
  void run(const call_context& ctx, Others&& others = {}) {
    core_.run(ctx, others);
  }

  // The call as steps, for a call that runs while its caller does other things:
  // start() once, then advance() until it returns true. advance() never waits, and
  // returns between passes once `handover` is raised; it throws the call's failure,
  // after cancelling the call's messages.
  void start() { core_.start(); }
  bool advance(const call_context& ctx, handover_request handover = {}) { return core_.advance(ctx, handover); }

  // Gives up the call: its messages are cancelled, so no byte touches its buffers later.
  [[noreturn]] void fail(const error& e) { core_.fail(e); }
  void abandon() noexcept { core_.abandon(); }

  // How many of the plan's operations have finished: a call that advanced moved it.
  std::size_t finished() const noexcept { return core_.finished(); }
  std::string timeout_message(const call_context& ctx) const { return core_.timeout_message(ctx); }

 private:
  compact_plan plan_;
  typed_element_work<T, Op, Space> work_;
  executor_core<Transport> core_;
};

// Runs `plan` for one call of this rank, with the bookkeeping of `room` (which a
// communicator keeps between calls).
template <class Space = host_memory, transport Transport, class T, class Op>
void execute(const schedule& plan, Transport& transport, call_buffers<T, Space> buffers, Op& op,
             const call_context& ctx, executor_workspace<typename Transport::request>& room) {
  executor<Transport, T, Op, Space>(plan, transport, buffers, op, room).run(ctx);
}

// The same with bookkeeping of its own, for a one-off call.
template <class Space = host_memory, transport Transport, class T, class Op>
void execute(const schedule& plan, Transport& transport, call_buffers<T, Space> buffers, Op& op,
             const call_context& ctx) {
  executor_workspace<typename Transport::request> room;
  execute<Space>(plan, transport, buffers, op, ctx, room);
}

}  // namespace collectives
