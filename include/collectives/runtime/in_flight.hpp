// Calls in flight: a non-blocking call is an executor that owns what it runs (its
// plan, its op, its bookkeeping) and is advanced a step at a time. A communicator
// keeps the calls it has started in `in_flight_calls` and advances all of them
// whenever any of them is tested or waited for, and while a blocking call waits, so
// that no call waits on messages that only another would take in.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "executor.hpp"

namespace collectives {

// One started call, with its element type, op and memory space erased.
class in_flight_call {
 public:
  enum class state { running, done, failed };

  explicit in_flight_call(const call_context& ctx) : ctx_(ctx) {}
  in_flight_call(const in_flight_call&) = delete;
  in_flight_call& operator=(const in_flight_call&) = delete;
  virtual ~in_flight_call() = default;

  // One step, which never waits: true when the call moved (or ended). Past its
  // deadline a call that has not finished fails with errc::timeout; any failure is
  // kept for the call's handle, and the call's messages are cancelled.
  bool advance(handover_request handover = {}) noexcept {
    if (!running()) return false;
    try {
      const std::size_t before = finished_operations();
      if (step(handover)) {
        state_.store(state::done, std::memory_order_release);
        return true;
      }
      if (finished_operations() != before) return true;
      if (now() >= ctx_.until) give_up_timed_out();
      return false;
    } catch (...) {
      end_with(std::current_exception());
      return true;
    }
  }

  // Ends a call that has not finished: its messages are cancelled, so nothing touches
  // its buffers afterwards, and `why` becomes its failure.
  void abandon(const error& why) noexcept {
    if (!running()) return;
    cancel();
    end_with(std::make_exception_ptr(why));
  }

  // Atomic, so that a handle may look while a progress thread advances the call.
  state current() const noexcept { return state_.load(std::memory_order_acquire); }

  // Takes in what the call's transport has received, without waiting; true when
  // anything came. Some transports (tcp) take messages in only when asked to.
  virtual bool look_for_messages() = 0;
  // The time by the call's transport (now_of), which its deadline is compared with.
  virtual deadline now() const = 0;
  bool running() const noexcept { return current() == state::running; }
  const std::exception_ptr& failure() const noexcept { return failure_; }
  const call_context& context() const noexcept { return ctx_; }

 protected:
  virtual bool step(handover_request handover) = 0;         // the executor's advance
  virtual std::size_t finished_operations() const noexcept = 0;
  virtual void give_up_timed_out() = 0;                      // throws errc::timeout
  virtual void cancel() noexcept = 0;

  call_context ctx_;

 private:
  void end_with(std::exception_ptr failure) noexcept {
    failure_ = std::move(failure);
    state_.store(state::failed, std::memory_order_release);  // publishes failure_
  }

  std::atomic<state> state_{state::running};
  std::exception_ptr failure_;
};

// What a started call runs before its own messages go out (the call check, the
// hosts' exchange), as steps that never wait, so that starting a call never waits on
// the network.
class call_prologue {
 public:
  virtual ~call_prologue() = default;
  virtual bool advance() = 0;  // true once done; throws its failure
  virtual std::size_t finished() const noexcept = 0;  // operations done: moves when it advanced
  [[noreturn]] virtual void fail_timed_out() = 0;
  virtual void abandon() noexcept = 0;  // cancels its messages
};

// The hosts' exchange as a stage: a call whose algorithm plans by hosts, started
// before the communicator knew them, is planned once they have come.
class hosts_stage : public call_prologue {
 public:
  virtual std::span<const int> hosts() const noexcept = 0;  // once advance() is done
};

// What a started call runs first, in this order: the call check; the hosts' exchange;
// then `plan`, given the hosts, makes the call's plan (the call has none until then).
struct call_stages {
  std::unique_ptr<call_prologue> check;
  std::unique_ptr<hosts_stage> hosts;
  std::function<std::shared_ptr<const compact_plan>(std::span<const int> hosts)> plan;
};

// An element work that owns its op, as a started call keeps it: the caller's op may be
// gone long before the call ends. Made per (element type, op, memory space); what
// keeps it is not.
class owned_element_work {
 public:
  template <class T, class Op, class Space>
  static owned_element_work make(memory_ops<Space> memory, Op op) {
    auto* kept = new op_and_work<T, Op, Space>(std::move(memory), std::move(op));
    return owned_element_work(kept->work, {kept, [](void* p) noexcept { delete static_cast<op_and_work<T, Op, Space>*>(p); }});
  }

  element_work& get() const noexcept { return *work_; }

 private:
  template <class T, class Op, class Space>
  struct op_and_work {
    op_and_work(memory_ops<Space> memory, Op o) : op(std::move(o)), work(std::move(memory), op) {}
    Op op;
    typed_element_work<T, Op, Space> work;
  };

  owned_element_work(element_work& work, std::unique_ptr<void, void (*)(void*) noexcept> owner) noexcept
      : work_(&work), owner_(std::move(owner)) {}

  element_work* work_;
  std::unique_ptr<void, void (*)(void*) noexcept> owner_;
};

// A call run by an executor's core over `transport`, after its stages if it has any.
// It owns a copy of its plan and its element work (with its op): the caller's plan
// cache and arguments may be gone long before it ends. The buffers stay the caller's.
// Compiled per transport: the element type, op and memory space are its work's.
template <transport Transport>
class started_call final : public in_flight_call {
 public:
  // `plan` is null where `first.plan` makes it, after the hosts' exchange.
  started_call(std::shared_ptr<const compact_plan> plan, Transport& transport, const void* input, void* output,
               owned_element_work work, const call_context& ctx, std::vector<std::shared_ptr<const void>> keep,
               call_stages&& first = {})
      : in_flight_call(ctx), transport_(transport), input_(input), output_(output), plan_(std::move(plan)),
        work_(std::move(work)), keep_(std::move(keep)), first_(std::move(first)) {
    if (!first_.check && !first_.hosts) begin();
  }

  bool look_for_messages() override { return transport_.wait_for_activity(now()); }
  deadline now() const override { return now_of(transport_); }

 private:
  call_prologue* stage() const noexcept {
    if (first_.check) return first_.check.get();
    return first_.hosts.get();
  }

  // The call's own messages: its plan (made now if it waited for the hosts) and core.
  void begin() {
    if (!plan_) {
      plan_ = first_.plan(first_.hosts->hosts());
      first_.hosts.reset();
      first_.plan = nullptr;
    }
    core_.emplace(*plan_, transport_, input_, output_, work_.get(), room_);
    core_->start();
  }

  bool step(handover_request handover) override {
    if (!core_) {
      if (first_.check) {
        if (!first_.check->advance()) return false;
        first_.check.reset();
      }
      if (first_.hosts && !first_.hosts->advance()) return false;
      begin();
    }
    return core_->advance(ctx_, handover);
  }
  std::size_t finished_operations() const noexcept override {
    if (call_prologue* s = stage()) return s->finished();
    return core_->finished();
  }
  void give_up_timed_out() override {
    if (call_prologue* s = stage()) s->fail_timed_out();
    core_->fail(error(errc::timeout, core_->timeout_message(ctx_)));
  }
  void cancel() noexcept override {
    if (first_.check) first_.check->abandon();
    if (first_.hosts) first_.hosts->abandon();
    if (core_) core_->abandon();
  }

  Transport& transport_;
  const void* input_;
  void* output_;
  std::shared_ptr<const compact_plan> plan_;  // shared with the plan cache, or its own
  owned_element_work work_;
  std::vector<std::shared_ptr<const void>> keep_;  // memory the call reads that the front end made (a copy of the input)
  call_stages first_;
  executor_workspace<typename Transport::request> room_;
  std::optional<executor_core<Transport>> core_;  // from the end of the stages on
};

// A communicator's calls in flight, in the order they started.
class in_flight_calls {
 public:
  in_flight_calls() = default;
  in_flight_calls(in_flight_calls&&) noexcept = default;
  in_flight_calls& operator=(in_flight_calls&&) noexcept = default;

  // Advances every call once; true when any of them moved. Calls that ended leave the
  // list (their handles keep them).
  bool progress(handover_request handover = {}) {
    if (calls_.empty()) return false;
    bool any = false;
    for (auto& c : calls_) any |= c->advance(handover);
    std::erase_if(calls_, [](const std::shared_ptr<in_flight_call>& c) { return !c->running(); });
    return any;
  }

  // What testing a handle does, and a progress thread's round: advances every call,
  // takes in what the transport has received, and advances them again. Never waits.
  bool poll() {
    if (calls_.empty()) return false;
    bool moved = progress();
    if (calls_.empty()) return moved;
    moved |= calls_.front()->look_for_messages();
    while (progress()) moved = true;  // until the calls wait on messages not yet here:
    return moved;                     // a caller may then sleep until the transport has news
  }

  bool empty() const noexcept { return calls_.empty(); }

  // Takes in what the transport has received (look_for_messages), without waiting.
  bool look_for_messages() { return !calls_.empty() && calls_.front()->look_for_messages(); }

  // Ends every call still running with `why` (the communicator is going away).
  void abandon_all(const error& why) noexcept {
    for (auto& c : calls_) c->abandon(why);
    calls_.clear();
  }

  // ---- Starting a call without waiting for it (nonblocking.hpp) ---------------------
  // While `starting()`, the front-end calls do not run: each hands its call to
  // launch(), and the one that started it takes it with take_started().

  bool starting() const noexcept { return starting_; }
  void begin_starting() noexcept { starting_ = true; }

  // Memory the next launched call must keep alive (made by the front end).
  void keep_for_next(std::shared_ptr<const void> memory) { keep_.push_back(std::move(memory)); }
  std::vector<std::shared_ptr<const void>> take_kept() noexcept { return std::exchange(keep_, {}); }

  // Takes a started call in and makes its first step, so that its first messages
  // go out before the caller turns to other work.
  void launch(std::shared_ptr<in_flight_call> call) {
    calls_.push_back(call);
    call->advance();
    started_ = std::move(call);
  }

  // The call launched since begin_starting() (null if none was: a call with nothing
  // to do), and the end of starting.
  std::shared_ptr<in_flight_call> take_started() noexcept {
    starting_ = false;
    keep_.clear();
    return std::exchange(started_, nullptr);
  }

 private:
  std::vector<std::shared_ptr<in_flight_call>> calls_;
  std::shared_ptr<in_flight_call> started_;
  std::vector<std::shared_ptr<const void>> keep_;
  bool starting_ = false;
};

}  // namespace collectives
