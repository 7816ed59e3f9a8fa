// The library's own exchanges inside a user's call (the call check, the hosts, the
// link figures): a plan of elements that are only moved, run by the executor's core
// as one more call of the communicator, advancing its calls in flight meanwhile.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "../algorithm/schedule.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../runtime/element_work.hpp"
#include "../runtime/executor_core.hpp"
#include "../runtime/workspace.hpp"

namespace collectives::detail {

// An exchange's timeout in the user's words: the call `ctx` names timed out on `rank`
// while `doing` what the exchange does; `ranks` (ranks_missing's list of those whose
// parts had not come: the executor cancelled every receive, so the parts that came are
// whole) had not made the call within the timeout.
COLLECTIVES_DECL error exchange_timed_out(const call_context& ctx, int rank, std::string_view doing,
                                          const std::string& ranks);

// One exchange as the call numbered next, named `call` (the user's), either as steps
// that never wait (a stage of a call started without waiting, or of several: its
// failure is kept for each of them) or run to its end. Past its deadline it fails with
// `timed_out(its context)`, which says in the user's words which ranks had not joined.
template <transport Tr>
class service_exchange {
 public:
  service_exchange(communicator<Tr>& comm, const schedule& plan, const void* input, void* output, std::size_t element_size,
                   const char* call, std::function<error(const call_context&)> timed_out)
      : transport_(comm.transport()), plan_(plan, comm.rank(), comm.size()),
        ctx_(call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout())), work_(element_size),
        core_(plan_, comm.transport(), input, output, work_, room_), timed_out_(std::move(timed_out)) {
    core_.start();
  }
  service_exchange(const service_exchange&) = delete;
  service_exchange& operator=(const service_exchange&) = delete;
  ~service_exchange() { abandon(); }

  // True once done; throws the exchange's failure, every time it is asked.
  bool advance() {
    if (failure_) std::rethrow_exception(failure_);
    if (done_) return true;
    try {
      if (core_.advance(ctx_)) return done_ = true;
      if (now_of(transport_) >= ctx_.until) core_.fail(timed_out_(ctx_));
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
    return false;
  }

  // To its end, advancing the communicator's calls in flight meanwhile.
  void run(communicator<Tr>& comm) {
    while (!advance()) {
      if (comm.progress_in_flight()) continue;
      if (!transport_.wait_for_activity(ctx_.until)) fail_timed_out();
    }
  }

  [[noreturn]] void fail_timed_out() {
    if (failure_) std::rethrow_exception(failure_);
    try {
      core_.fail(timed_out_(ctx_));
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
  }

  // Cancels its messages, so that none lands in its buffers later.
  void abandon() noexcept {
    if (done_ || failure_ || abandoned_) return;
    core_.abandon();
    abandoned_ = true;
  }

  std::size_t finished() const noexcept { return core_.finished(); }
  const call_context& context() const noexcept { return ctx_; }

 private:
  Tr& transport_;
  compact_plan plan_;
  call_context ctx_;
  moved_bytes_work work_;
  executor_workspace<typename Tr::request> room_;
  executor_core<Tr> core_;
  std::function<error(const call_context&)> timed_out_;
  bool done_ = false, abandoned_ = false;
  std::exception_ptr failure_;
};

// Runs `plan` over `input` and `output`, elements of `element_size` bytes, as the
// call `ctx` names, to its end. `room` is the exchange's own bookkeeping: an exchange
// may run while a call it serves is being started. For the link figures' measurement,
// whose runs take call numbers counted ahead.
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

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "exchange.ipp"
#endif
