// The executor's core: runs any plan (a schedule as the runtime keeps it,
// compact_plan.hpp) on a transport. Operations start as soon as
// their dependencies finish; local steps (copy, reduce, finalize) go through the
// call's element work (element_work.hpp; on device buffers they are enqueued on the
// transport's stream, and the call ends once they have run), messages are posted to
// the transport and polled, and the thread sleeps in the transport between events.
// With COLLECTIVES_TRACE set, it records the call and its steps (trace.hpp).
// Nothing here depends on the element type or the op: the core is compiled once per
// transport (the compiled library instantiates it for the built-in ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../concepts/schedule.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../memory_space.hpp"
#include "../trace.hpp"
#include "compact_plan.hpp"
#include "handover.hpp"
#include "element_work.hpp"
#include "prefetch.hpp"
#include "workspace.hpp"

namespace collectives {

// Which call this is, for error messages and deadlines.
struct call_context {
  const char* name = "";
  std::uint64_t call = 0;
  deadline until{};
  long long timeout_ms = 0;

  // A call that starts at `now` (by its transport's clock: now_of) and may take `timeout`.
  static call_context starting_at(deadline now, const char* name, std::uint64_t call, std::chrono::milliseconds timeout) {
    return {name, call, now + timeout, static_cast<long long>(timeout.count())};
  }
  // The same by steady_clock, for a transport that keeps no clock of its own.
  static call_context starting_now(const char* name, std::uint64_t call, std::chrono::milliseconds timeout) {
    return starting_at(clock::now(), name, call, timeout);
  }
};

namespace detail {

inline std::string describe(const operation& op) {
  const bool sending = op.kind == op_kind::send;
  return std::string(sending ? "send to" : "receive from") + " rank " + std::to_string(op.peer) + " (" +
         std::to_string(sending ? op.src.count : op.dst.count) + " elements)";
}

}  // namespace detail

template <transport Transport>
class executor_core {
  using request = typename Transport::request;
  using what = trace::what;  // what a trace event records

 public:
  using workspace = executor_workspace<request>;

  // `input` and `output` are the caller's buffers, in the memory space `work` moves.
  executor_core(const compact_plan& plan, Transport& transport, const void* input, void* output, element_work& work,
                workspace& room)
      : plan_(plan), transport_(transport), rank_(transport.rank()), work_(work), input_(static_cast<const std::byte*>(input)),
        output_(static_cast<std::byte*>(output)), room_(room),
        fused_(fused_recv_reduce_transport<Transport> && !work.device) {}
  executor_core(const executor_core&) = delete;  // it stays where it started: its trace points at it
  executor_core& operator=(const executor_core&) = delete;

  // Runs the call to its end on this thread. `others` advances whatever else is in
  // flight on the same transport (a communicator's non-blocking calls) between steps,
  // so that a blocking call never waits on messages that only they would take in.
  template <class Others>
  void run(const call_context& ctx, Others&& others) {
    start();
    std::size_t finished_before_wait = finished_, waits = 0;
    while (!advance(ctx)) {
      if (others()) continue;
      // Past the deadline, even if wake-ups keep coming (say, from messages this call
      // never matches), the call fails. The clock is read after a wake-up that finished
      // nothing, and every 16th: a small call waits once or twice, and a clock read is
      // a visible part of its microsecond.
      const bool finished_nothing = finished_ == finished_before_wait;
      finished_before_wait = finished_;
      const bool look_at_clock = finished_nothing || ++waits % 16 == 0;
      const auto wait = [&] { return transport_.wait_for_activity(ctx.until); };
      if ((look_at_clock && now_of(transport_) >= ctx.until) || !traced(what::wait, 0, wait))
        fail(error(errc::timeout, timeout_message(ctx)));
    }
  }

  // The call as steps, for a call that runs while its caller does other things:
  // start() once, then advance() until it returns true. advance() never waits, and
  // returns between passes once `handover` is raised; it throws the call's failure,
  // after cancelling the call's messages.
  void start();
  bool advance(const call_context& ctx, handover_request handover = {});

  // Asks for the lines the next advance() will read, ahead of it, for a driver that
  // steps many calls in turn (a simulated cluster's thousands of ranks, whose state is
  // cold by the time each one's turn comes again): stage 1 once this object and its
  // workspace are in the cache, stage 2 later, once what stage 1 asked for is in.
  void prefetch(int stage) const noexcept;

  // Gives up the call: its messages are cancelled, so no byte touches its buffers later.
  [[noreturn]] void fail(const error& e);
  void abandon() noexcept { cancel_and_trim(); }

  // How many of the plan's operations have finished: a call that advanced moved it.
  std::size_t finished() const noexcept { return finished_; }

  std::string timeout_message(const call_context& ctx) const;

 private:
  // Every container is sized here, once, and keeps its capacity for the next call.
  void prepare();
  void trim();

  // A transport that tells its peers why this rank left learns why its call failed.
  static constexpr bool notes_failures = requires(Transport& t, std::string_view w) { t.note_failure(w); };
  void tell_transport_why() noexcept;  // from a catch block

  void cancel_and_trim() noexcept;

  std::byte* address(region r) const;
  std::size_t bytes_in(region r) const noexcept { return r.count * work_.element_size; }

  void finish(op_id id);
  // A local step that has run is done; where the transport's clock charges it (a
  // simulated core), once the transport says so. A copy onto itself costs nothing.
  void finish_local(op_id id, const operation& o, local_step step) {
    if constexpr (charges_local_steps<Transport>) {
      if (step == local_step::reduce || address(o.dst) != address(o.src))
        if (auto charged = transport_.post_local_step(step, bytes_in(o.dst))) return activate(id, *charged, o);
    }
    finish(id);
  }
  bool start_ready(const call_context& ctx);

  // Messages between buffers of the call's memory space: plain ones for host memory,
  // the transport's device messages otherwise.
  request post_send(int peer, message_tag tag, std::span<const std::byte> bytes);
  request post_recv(int peer, message_tag tag, std::span<std::byte> bytes);

  // The fused path reduces straight from the wire into the destination (host buffers
  // on a transport that offers it).
  request post_recv_reduce(const operation& o, message_tag tag);

  // A posted request (a message, or a local step the transport charges) joins the
  // active list; a transport that lists finished requests is asked to list this one by
  // its place there. For such a transport the list's entries keep their places (a
  // finished one is vacated, and the next request takes it), so that the place the
  // transport reports is the entry, with no look-up by op (a ring of thousands of ranks
  // would miss the cache on it for every message); and a fused receive's target sits
  // at the same place in `fused`.
  void activate(op_id id, request req, const operation& o);
  static constexpr bool keeps_places = lists_finished_requests<Transport>;
  std::uint32_t next_place() const noexcept {
    return room_.vacant.empty() ? static_cast<std::uint32_t>(room_.active.size()) : room_.vacant.back();
  }
  bool poll_active();
  bool poll_listed();
  // Active entry i has finished: it leaves the list and its op finishes.
  void complete_active(std::size_t i);

  // ---- The trace (and the DEBUG and TRACE log): one branch on tracing_ while off ----

  // Runs `step`, timed when tracing: a local step over `count` elements, or a wait.
  template <class Step>
  auto traced(what kind, std::size_t count, Step&& step) {
    if (!tracing_) [[likely]]
      return step();
    const std::int64_t began = trace::now_ns();
    if constexpr (std::is_void_v<decltype(step())>) {
      step();
      trace_step(kind, began, trace::now_ns() - began, -1, count * work_.element_size);
    } else {
      auto result = step();
      trace_step(kind, began, trace::now_ns() - began, -1, count * work_.element_size);
      return result;
    }
  }

  void trace_begin() noexcept;

  // The call's own event, once: when it finishes, or fails (after its first advance,
  // which names it).
  void trace_end(bool failed) noexcept;

  void trace_step(what kind, std::int64_t began, std::int64_t duration, int peer, std::size_t bytes) noexcept;

  // An event as a DEBUG or TRACE line; a line that cannot be made (no memory) is left out.
  void log_event(log::level at, const trace::event& e) noexcept;

  // A fused receive reduces in the transport, piece by piece as its bytes arrive: when
  // tracing, its sink goes through `traced_sink_`, which times each piece and names the
  // call it belongs to, then hands it to the element work's own sink.
  struct traced_sink {
    chunk_sink::consume_function reduce;
    void* op;
    executor_core* self;
  };

  void trace_reductions_of(fused_target& target, chunk_sink& sink) noexcept;

  // A message posted, or seen complete.
  void trace_message(bool posted, const operation& o) noexcept;

  const compact_plan& plan_;
  Transport& transport_;
  const int rank_;  // the plan is written relative to it
  element_work& work_;
  const std::byte* input_;
  std::byte* output_;
  workspace& room_;
  const bool fused_;
  std::size_t next_ready_ = 0, finished_ = 0;
  std::byte* scratch_ = nullptr;
  std::byte* staging_ = nullptr;
  const op_id* successor_begin_ = nullptr;  // the plan's successor lists
  const op_id* successors_ = nullptr;
  // Read once per call: the settings do not change under a running call. The log's
  // DEBUG and TRACE lines come from the same points as the timeline's events.
  bool tracing_ = trace::enabled() || log::enabled(log::level::debug);
  traced_sink traced_sink_{};
  const call_context* trace_context_ = nullptr;  // the call's name and number, from its last advance
  std::uint64_t trace_id_ = 0;
  std::int64_t trace_began_ = 0;
  std::size_t trace_sent_ = 0, trace_received_ = 0;
};

template <transport Transport>
void executor_core<Transport>::start() {
  if (tracing_) trace_begin();
  prepare();
}

template <transport Transport>
bool executor_core<Transport>::advance(const call_context& ctx, handover_request handover) {
  if (tracing_) trace_context_ = &ctx;
  try {
    while (finished_ < plan_.size()) {
      bool progressed = start_ready(ctx);
      progressed |= poll_active();
      if (!progressed || handover.raised()) return false;
    }
    // Device steps were only enqueued: the call is done once they are.
    if (work_.device) work_.synchronize(ctx.until);
  } catch (...) {
    tell_transport_why();
    cancel_and_trim();
    throw;
  }
  trim();
  if (tracing_) trace_end(false);
  return true;
}

template <transport Transport>
void executor_core<Transport>::prefetch(int stage) const noexcept {
  if (stage == 1) {
    detail::prefetch(room_.listed.data());
    detail::prefetch(room_.active.data());
    detail::prefetch(room_.ready.data());
    if constexpr (keeps_places) {
      detail::prefetch(room_.vacant.data());
      if (fused_) detail::prefetch(room_.fused.data() + next_place());
    }
    return;
  }
  // Stage 2: the first finished messages' bookkeeping, where the transport lists them:
  // their dependants' counts, and what the transport's test reads.
  if constexpr (keeps_places) {
    for (std::size_t k = 0; k < room_.listed.size() && k < 2; ++k) {
      const auto& a = room_.active[room_.listed[k]];
      detail::prefetch(room_.waiting.data() + a.id);  // its dependants' counts are near its own
      if constexpr (requires { transport_.prefetch(a.req); }) transport_.prefetch(a.req);
    }
  }
}

template <transport Transport>
void executor_core<Transport>::fail(const error& e) {
  if constexpr (notes_failures) transport_.note_failure(e.what());
  cancel_and_trim();
  throw e;
}

template <transport Transport>
std::string executor_core<Transport>::timeout_message(const call_context& ctx) const {
  std::string m = std::string(ctx.name) + ": timed out after " + std::to_string(ctx.timeout_ms) + " ms on rank " +
                  std::to_string(transport_.rank()) + " waiting to ";
  std::size_t posted = 0;
  for (const auto& a : room_.active) {
    if (keeps_places && a.id == workspace::vacated) continue;
    if (posted < 4) m += (posted ? ", " : "") + detail::describe(plan_.op(a.id, rank_));
    ++posted;
  }
  if (posted > 4) m += " and " + std::to_string(posted - 4) + " more";
  if (posted == 0) m += "finish, with nothing posted (a schedule whose dependencies never resolve)";
  return m;
}

template <transport Transport>
void executor_core<Transport>::prepare() {
  const std::size_t n = plan_.size();
  std::size_t requests = 0, fused_receives = 0;  // posted to the transport: messages, and charged local steps
  room_.waiting.assign(n, 0);
  room_.ready.clear();
  room_.active.clear();
  room_.listed.clear();
  room_.vacant.clear();
  room_.fused.clear();
  successor_begin_ = plan_.successor_begin();
  successors_ = plan_.successors();
  for (std::size_t k = 0; k < plan_.edges(); ++k) ++room_.waiting[successors_[k]];
  for (std::size_t i = 0; i < n; ++i) {
    const op_kind kind = plan_.kind(static_cast<op_id>(i));
    const bool local = kind == op_kind::copy || kind == op_kind::reduce;
    requests += is_message(kind) || (charges_local_steps<Transport> && local);
    fused_receives += kind == op_kind::recv_reduce;
  }
  room_.ready.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    if (room_.waiting[i] == 0) room_.ready.push_back(static_cast<op_id>(i));
  room_.active.reserve(requests);
  // Sinks point into it: it must never move. With places kept, a fused receive's target
  // is at its place in the active list, which never has more than the plan's requests.
  if (fused_) room_.fused.reserve(keeps_places ? requests : fused_receives);
  scratch_ = work_.memory(element_work::room::scratch, plan_.scratch_count(), room_.scratch);
  if (!fused_) staging_ = work_.memory(element_work::room::staging, plan_.staging_count(), room_.staging);
}

template <transport Transport>
void executor_core<Transport>::trim() {
  room_.trim();
}

template <transport Transport>
void executor_core<Transport>::tell_transport_why() noexcept {
  if constexpr (notes_failures) {
    try {
      throw;
    } catch (const std::exception& e) {
      transport_.note_failure(e.what());
    } catch (...) {
      transport_.note_failure("its call failed with an exception that is not a std::exception");
    }
  }
}

template <transport Transport>
void executor_core<Transport>::cancel_and_trim() noexcept {
  for (auto& a : room_.active)
    if (!keeps_places || a.id != workspace::vacated) transport_.cancel(a.req);
  room_.active.clear();
  room_.vacant.clear();
  trim();
  if (tracing_) trace_end(true);
}

template <transport Transport>
std::byte* executor_core<Transport>::address(region r) const {
  const std::size_t offset = r.offset * work_.element_size;
  switch (r.buffer) {
    case buffer_id::input: return const_cast<std::byte*>(input_) + offset;  // only ever read
    case buffer_id::output: return output_ + offset;
    case buffer_id::scratch: return scratch_ + offset;
    case buffer_id::staging: return staging_ + offset;
  }
  return nullptr;
}

template <transport Transport>
void executor_core<Transport>::finish(op_id id) {
  ++finished_;
  const auto begin = successor_begin_[id], end = successor_begin_[id + 1];
  for (auto k = begin; k < end; ++k)
    if (--room_.waiting[successors_[k]] == 0) room_.ready.push_back(successors_[k]);
}

template <transport Transport>
bool executor_core<Transport>::start_ready(const call_context& ctx) {
  bool any = false;
  while (next_ready_ < room_.ready.size()) {
    const op_id id = room_.ready[next_ready_++];
    const operation o = plan_.op(id, rank_);
    any = true;
    const message_tag tag{ctx.call, o.tag};
    switch (o.kind) {
      case op_kind::copy:
        traced(what::copy, o.dst.count, [&] { work_.copy(address(o.dst), address(o.src), o.dst.count); });
        finish_local(id, o, local_step::copy);
        break;
      case op_kind::reduce:
        traced(what::reduce, o.dst.count, [&] { work_.combine(address(o.dst), address(o.src), o.dst.count, o.order); });
        finish_local(id, o, local_step::reduce);
        break;
      case op_kind::finalize:
        if (work_.finalizes)
          traced(what::finalize, o.dst.count, [&] { work_.finalize(address(o.dst), o.dst.count, transport_.size()); });
        finish(id);
        break;
      case op_kind::send:
        if (o.src.count == 0) finish(id);
        else activate(id, post_send(o.peer, tag, {address(o.src), bytes_in(o.src)}), o);
        break;
      case op_kind::recv:
        if (o.dst.count == 0) finish(id);
        else activate(id, post_recv(o.peer, tag, {address(o.dst), bytes_in(o.dst)}), o);
        break;
      case op_kind::recv_reduce:
        if (o.dst.count == 0) finish(id);
        else if (fused_) activate(id, post_recv_reduce(o, tag), o);
        else activate(id, post_recv(o.peer, tag, {address(o.src), bytes_in(o.src)}), o);
        break;
    }
  }
  // All ready ops have started: the list starts again from its front, so that it holds
  // the few ops ready at one time, not all the plan's (a rank of a simulated ring of
  // thousands would otherwise walk a fresh cache line every few steps).
  room_.ready.clear();
  next_ready_ = 0;
  return any;
}

template <transport Transport>
auto executor_core<Transport>::post_send(int peer, message_tag tag, std::span<const std::byte> bytes) -> request {
  if constexpr (moves_memory_of<Transport, device_memory>)
    if (work_.device) return transport_.post_send(peer, tag, bytes, device_memory{});
  return transport_.post_send(peer, tag, bytes);
}

template <transport Transport>
auto executor_core<Transport>::post_recv(int peer, message_tag tag, std::span<std::byte> bytes) -> request {
  if constexpr (moves_memory_of<Transport, device_memory>)
    if (work_.device) return transport_.post_recv(peer, tag, bytes, device_memory{});
  return transport_.post_recv(peer, tag, bytes);
}

template <transport Transport>
auto executor_core<Transport>::post_recv_reduce(const operation& o, message_tag tag) -> request {
  if constexpr (fused_recv_reduce_transport<Transport>) {
    const fused_target made{address(o.dst), work_.op_address(), o.order, o.base.count ? address(o.base) : nullptr};
    fused_target* place = nullptr;
    if constexpr (keeps_places) {
      const std::uint32_t i = next_place();
      if (i >= room_.fused.size()) room_.fused.resize(i + 1);  // within its capacity: nothing moves
      place = &room_.fused[i];
      *place = made;
    } else {
      place = &room_.fused.emplace_back(made);
    }
    fused_target& target = *place;
    chunk_sink sink{&target, work_.fused_reduce()};
    if (tracing_) trace_reductions_of(target, sink);
    return transport_.post_recv_reduce(o.peer, tag, bytes_in(o.dst), work_.element_size, sink);
  } else {
    throw error(errc::invalid_config, "a fused receive on a transport without one");  // never: fused_ is false there
  }
}

template <transport Transport>
void executor_core<Transport>::activate(op_id id, request req, const operation& o) {
  if constexpr (keeps_places) {
    const std::uint32_t i = next_place();
    if (i == room_.active.size()) room_.active.push_back({id, req});
    else {
      room_.vacant.pop_back();
      room_.active[i] = {id, req};
    }
    transport_.watch(room_.active[i].req, &room_.listed, i);
  } else {
    room_.active.push_back({id, req});
  }
  if (tracing_ && is_message(o.kind)) trace_message(true, o);
}

template <transport Transport>
bool executor_core<Transport>::poll_active() {
  if constexpr (lists_finished_requests<Transport>) return poll_listed();
  bool any = false;
  for (std::size_t i = 0; i < room_.active.size();) {
    if (!transport_.test(room_.active[i].req)) { ++i; continue; }
    complete_active(i);
    any = true;
  }
  return any;
}

template <transport Transport>
bool executor_core<Transport>::poll_listed() {
  if (room_.listed.empty()) return false;
  for (std::size_t k = 0; k < room_.listed.size(); ++k) {
    const std::uint32_t i = room_.listed[k];
    if (transport_.test(room_.active[i].req)) complete_active(i);  // a failure throws
  }
  room_.listed.clear();
  return true;
}

template <transport Transport>
void executor_core<Transport>::complete_active(std::size_t i) {
  const op_id id = room_.active[i].id;
  if constexpr (keeps_places) {
    room_.active[i].id = workspace::vacated;
    room_.vacant.push_back(static_cast<std::uint32_t>(i));
  } else {
    room_.active[i] = std::move(room_.active.back());
    room_.active.pop_back();
  }
  if (tracing_ && is_message(plan_.kind(id))) trace_message(false, plan_.op(id, rank_));
  if (!fused_ && plan_.kind(id) == op_kind::recv_reduce) {
    const operation o = plan_.op(id, rank_);
    traced(what::reduce, o.dst.count, [&] {
      if (o.base.count && address(o.base) != address(o.dst)) work_.copy(address(o.dst), address(o.base), o.dst.count);
      work_.combine(address(o.dst), address(o.src), o.dst.count, o.order);
    });
  }
  finish(id);
}

template <transport Transport>
void executor_core<Transport>::trace_begin() noexcept {
  trace_id_ = trace::enabled() ? trace::recorder::instance().next_call_id() : 0;
  trace_began_ = trace::now_ns();
  trace_sent_ = trace_received_ = 0;
  for (op_id i = 0; i < plan_.size(); ++i) {
    const operation o = plan_.op(i, rank_);
    if (o.kind == op_kind::send) trace_sent_ += bytes_in(o.src);
    if (o.kind == op_kind::recv || o.kind == op_kind::recv_reduce) trace_received_ += bytes_in(o.dst);
  }
}

template <transport Transport>
void executor_core<Transport>::trace_end(bool failed) noexcept {
  if (trace_context_ == nullptr) return;
  trace::event e;
  e.start_ns = trace_began_;
  e.duration_ns = trace::now_ns() - trace_began_;
  e.call_id = trace_id_;
  e.call = trace_context_->call;
  e.bytes = trace_sent_;
  e.received = trace_received_;
  e.rank = transport_.rank();
  e.size = transport_.size();
  e.failed = failed;
  e.algorithm = plan_.algorithm();
  std::strncpy(e.name, trace_context_->name, sizeof e.name - 1);
  if (trace::enabled()) trace::recorder::instance().record(e);
  log_event(log::level::debug, e);
  trace_context_ = nullptr;
}

template <transport Transport>
void executor_core<Transport>::trace_step(what kind, std::int64_t began, std::int64_t duration, int peer,
                                          std::size_t bytes) noexcept {
  trace::event e;
  e.start_ns = began;
  e.duration_ns = duration;
  e.call_id = trace_id_;
  e.call = trace_context_ ? trace_context_->call : 0;
  e.bytes = bytes;
  e.rank = transport_.rank();
  e.peer = peer;
  e.kind = kind;
  if (trace::enabled()) trace::recorder::instance().record(e);
  log_event(log::level::trace, e);
}

template <transport Transport>
void executor_core<Transport>::log_event(log::level at, const trace::event& e) noexcept {
  if (!log::enabled(at)) return;
  try {
    log::write(at, trace::detail::line_of(e, trace_context_ ? trace_context_->name : "a call"));
  } catch (...) {
  }
}

template <transport Transport>
void executor_core<Transport>::trace_reductions_of(fused_target& target, chunk_sink& sink) noexcept {
  traced_sink_ = {sink.consume, target.op, this};
  target.op = &traced_sink_;
  sink.consume = [](void* context, std::size_t offset, std::span<const std::byte> piece) {
    fused_target t = *static_cast<const fused_target*>(context);
    const auto& traced = *static_cast<const traced_sink*>(t.op);
    t.op = traced.op;
    const std::int64_t began = trace::now_ns();
    traced.reduce(&t, offset, piece);
    traced.self->trace_step(what::reduce, began, trace::now_ns() - began, -1, piece.size());
  };
}

template <transport Transport>
void executor_core<Transport>::trace_message(bool posted, const operation& o) noexcept {
  const bool sending = o.kind == op_kind::send;
  const what kind = posted ? (sending ? what::post_send : what::post_recv)
                           : (sending ? what::complete_send : what::complete_recv);
  trace_step(kind, trace::now_ns(), 0, o.peer, sending ? bytes_in(o.src) : bytes_in(o.dst));
}

}  // namespace collectives
