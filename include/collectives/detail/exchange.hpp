// The library's own exchanges inside a user's call (the call check, the hosts, the
// link figures): a plan of elements that are only moved, run by the executor's core
// as one more call of the communicator, advancing its calls in flight meanwhile.
#pragma once

#include <cstddef>

#include "../algorithm/schedule.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../runtime/element_work.hpp"
#include "../runtime/executor_core.hpp"
#include "../runtime/workspace.hpp"

namespace collectives::detail {

// Runs `plan` over `input` and `output`, elements of `element_size` bytes, as the
// call `ctx` names. `room` is the exchange's own bookkeeping: an exchange may run
// while a call it serves is being started.
template <transport Tr>
void exchange(communicator<Tr>& comm, const schedule& plan, const void* input, void* output, std::size_t element_size,
              const call_context& ctx, executor_workspace<typename Tr::request>& room) {
  moved_bytes_work work(element_size);
  const compact_plan compact(plan, comm.rank(), comm.size());
  executor_core<Tr>(compact, comm.transport(), input, output, work, room).run(ctx, [&] {
    return comm.progress_in_flight();
  });
}

template <transport Tr>
void exchange(communicator<Tr>& comm, const schedule& plan, const void* input, void* output, std::size_t element_size,
              const call_context& ctx) {
  executor_workspace<typename Tr::request> room;
  exchange(comm, plan, input, output, element_size, ctx, room);
}

}  // namespace collectives::detail
