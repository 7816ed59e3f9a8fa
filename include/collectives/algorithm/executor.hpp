// The one executor: runs any schedule on any transport, for any element type, op
// and memory space. Operations start as soon as their dependencies finish; local
// steps (copy, reduce, finalize) run on the calling thread (on device buffers they are
// enqueued on the transport's stream, and the call ends once they have run), messages
// are posted to the transport and polled, and the thread sleeps in the transport
// between events. With COLLECTIVES_TRACE set, it records the call and its steps
// (trace.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../config.hpp"
#include "../concepts/reduce_op.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../memory_space.hpp"
#include "../ops/host_reduce.hpp"
#include "../trace.hpp"
#include "schedule.hpp"
#include "workspace.hpp"

namespace collectives {

// The caller's buffers for one call; both hold elements of T in memory space Space.
template <class T, class Space = host_memory>
struct call_buffers {
  const T* input = nullptr;
  T* output = nullptr;
};

// Which call this is, for error messages and deadlines.
struct call_context {
  const char* name = "";
  std::uint64_t call = 0;
  deadline until{};
  long long timeout_ms = 0;

  // A call that starts now and may take `timeout`.
  static call_context starting_now(const char* name, std::uint64_t call, std::chrono::milliseconds timeout) {
    return {name, call, clock::now() + timeout, static_cast<long long>(timeout.count())};
  }
};

// Stands in for an op where a schedule combines nothing (broadcast, gather, ...).
struct no_reduce {
  static constexpr bool commutative = true;
  template <class T>
  COLLECTIVES_HOST_DEVICE T operator()(const T& a, const T&) const { return a; }
};

// What a blocking call advances besides itself when nothing else is in flight.
struct nothing_else {
  constexpr bool operator()() const noexcept { return false; }
};

namespace detail {

// Reduces a piece of a fused receive into its target, with the target's types restored.
template <class T, class Op>
void reduce_piece(const fused_target& t, Op& op, std::size_t offset, std::span<const std::byte> piece) {
  T* dst = static_cast<T*>(t.dst) + offset / sizeof(T);
  const std::size_t n = piece.size() / sizeof(T);
  if (reinterpret_cast<std::uintptr_t>(piece.data()) % alignof(T) == 0) {
    memory_ops<host_memory>::combine(dst, reinterpret_cast<const T*>(piece.data()), n, op, t.order);
    return;
  }
  // A transport's read buffer need not be aligned for T (tcp's payloads follow frame
  // headers), and reading a T there is undefined behaviour (UBSan reports it): such a
  // piece goes through an aligned buffer on the stack, a few KiB at a time.
  constexpr std::size_t room = sizeof(T) < 4096 ? 4096 / sizeof(T) : 1;
  alignas(T) std::byte aligned[room * sizeof(T)];
  for (std::size_t done = 0; done < n; done += room) {
    const std::size_t k = n - done < room ? n - done : room;
    std::memcpy(aligned, piece.data() + done * sizeof(T), k * sizeof(T));
    memory_ops<host_memory>::combine(dst + done, reinterpret_cast<const T*>(aligned), k, op, t.order);
  }
}

template <class T, class Op>
void reduce_into(void* target, std::size_t offset, std::span<const std::byte> piece) {
  const auto& t = *static_cast<const fused_target*>(target);
  reduce_piece<T>(t, *static_cast<Op*>(t.op), offset, piece);
}

inline std::string describe(const operation& op) {
  const bool sending = op.kind == op_kind::send;
  return std::string(sending ? "send to" : "receive from") + " rank " + std::to_string(op.peer) + " (" +
         std::to_string(sending ? op.src.count : op.dst.count) + " elements)";
}

}  // namespace detail

// The local steps' implementation for buffers in Space: the transport's, when it
// keeps device state for them (a stream), else a default-constructed memory_ops.
template <class Space, class Transport>
memory_ops<Space> memory_ops_of(Transport& transport) {
  if constexpr (requires { { transport.memory_operations(Space{}) } -> std::same_as<memory_ops<Space>>; })
    return transport.memory_operations(Space{});
  else
    return {};
}

template <transport Transport, class T, class Op, class Space = host_memory>
class executor {
  static_assert(moves_memory_of<Transport, Space>,
                "collectives: this transport moves host memory only; device buffers need a transport that moves "
                "device memory (cuda_ipc)");
  using request = typename Transport::request;
  using what = trace::what;  // what a trace event records
  using owned_memory = decltype(std::declval<memory_ops<Space>&>().template allocate<T>(0));

 public:
  using workspace = executor_workspace<request>;

  executor(const schedule& plan, Transport& transport, call_buffers<T, Space> buffers, Op& op, workspace& room)
      : plan_(plan), transport_(transport), memory_(memory_ops_of<Space>(transport)), buffers_(buffers), op_(op), room_(room) {}
  executor(const executor&) = delete;  // it stays where it started: its trace points at it
  executor& operator=(const executor&) = delete;

  // Runs the call to its end on this thread. `others` advances whatever else is in
  // flight on the same transport (a communicator's non-blocking calls) between steps,
  // so that a blocking call never waits on messages that only they would take in.
  template <class Others = nothing_else>
  void run(const call_context& ctx, Others&& others = {}) {
    start();
    while (!advance(ctx)) {
      if (others()) continue;
      // Past the deadline with nothing done, even if wake-ups keep coming (say, from
      // messages this call never matches), the call fails.
      const auto wait = [&] { return transport_.wait_for_activity(ctx.until); };
      if (clock::now() >= ctx.until || !traced(what::wait, 0, wait)) fail(error(errc::timeout, timeout_message(ctx)));
    }
  }

  // The call as steps, for a call that runs while its caller does other things:
  // start() once, then advance() until it returns true. advance() never waits; it
  // throws the call's failure, after cancelling the call's messages.
  void start() {
    if (tracing_) trace_begin();
    prepare();
  }

  bool advance(const call_context& ctx) {
    if (tracing_) trace_context_ = &ctx;
    try {
      while (finished_ < plan_.ops.size()) {
        bool progressed = start_ready(ctx);
        progressed |= poll_active();
        if (!progressed) return false;
      }
      // Device steps were only enqueued: the call is done once they are.
      if constexpr (requires { memory_.synchronize(ctx.until); }) memory_.synchronize(ctx.until);
    } catch (...) {
      tell_transport_why();
      cancel_and_trim();
      throw;
    }
    trim();
    if (tracing_) trace_end(false);
    return true;
  }

  // Gives up the call: its messages are cancelled, so no byte touches its buffers later.
  [[noreturn]] void fail(const error& e) {
    if constexpr (notes_failures) transport_.note_failure(e.what());
    cancel_and_trim();
    throw e;
  }
  void abandon() noexcept { cancel_and_trim(); }

  // How many of the plan's operations have finished: a call that advanced moved it.
  std::size_t finished() const noexcept { return finished_; }

  std::string timeout_message(const call_context& ctx) const {
    std::string m = std::string(ctx.name) + ": timed out after " + std::to_string(ctx.timeout_ms) + " ms on rank " +
                    std::to_string(transport_.rank()) + " waiting to ";
    for (std::size_t i = 0; i < room_.active.size() && i < 4; ++i)
      m += (i ? ", " : "") + detail::describe(plan_.ops[room_.active[i].id]);
    if (room_.active.size() > 4) m += " and " + std::to_string(room_.active.size() - 4) + " more";
    if (room_.active.empty()) m += "finish, with nothing posted (a schedule whose dependencies never resolve)";
    return m;
  }

 private:
  // Host scratch and staging come from the workspace; other memory spaces allocate
  // their own per call.
  static constexpr bool reuses_memory = std::is_same_v<Space, host_memory> && alignof(T) <= reusable_host_memory::alignment;

  // The fused path reduces straight from the wire into the destination; it applies
  // to host buffers only (a device transport brings its own).
  static constexpr bool fused = fused_recv_reduce_transport<Transport> && std::is_same_v<Space, host_memory>;

  // Every container is sized here, once, and keeps its capacity for the next call.
  void prepare() {
    const std::size_t n = plan_.ops.size();
    std::size_t messages = 0, fused_receives = 0;
    room_.waiting.assign(n, 0);
    room_.successor_begin.assign(n + 1, 0);
    room_.ready.clear();
    room_.active.clear();
    room_.fused.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const operation& o = plan_.ops[i];
      room_.waiting[i] = o.dep_count;
      for (op_id d : plan_.deps_of(o)) ++room_.successor_begin[d];
      messages += o.kind == op_kind::send || o.kind == op_kind::recv || o.kind == op_kind::recv_reduce;
      fused_receives += o.kind == op_kind::recv_reduce;
    }
    // room_.successor_begin[d] counts d's successors; running sums make it the end of d's
    // list, and filling each list backwards (later ops first, so lists stay in op
    // order) leaves it at the list's beginning, where the next list ends.
    for (std::size_t i = 1; i <= n; ++i) room_.successor_begin[i] += room_.successor_begin[i - 1];
    room_.successors.resize(plan_.deps.size());
    for (std::size_t i = n; i-- > 0;)
      for (op_id d : plan_.deps_of(plan_.ops[i])) room_.successors[--room_.successor_begin[d]] = static_cast<op_id>(i);
    room_.ready.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      if (room_.waiting[i] == 0) room_.ready.push_back(static_cast<op_id>(i));
    room_.active.reserve(messages);
    if constexpr (fused) room_.fused.reserve(fused_receives);  // sinks point into it: it must never move
    scratch_ = memory_for(plan_.scratch_count, room_.scratch, owned_scratch_);
    if (!fused) staging_ = memory_for(plan_.staging_count, room_.staging, owned_staging_);
  }

  T* memory_for(std::size_t count, reusable_host_memory& reusable, owned_memory& owned) {
    if (count == 0) return nullptr;
    if constexpr (reuses_memory) return reinterpret_cast<T*>(reusable.get(count * sizeof(T)));
    owned = memory_.template allocate<T>(count);
    return owned.get();
  }

  void trim() {
    room_.scratch.trim();
    room_.staging.trim();
  }

  // A transport that tells its peers why this rank left learns why its call failed.
  static constexpr bool notes_failures = requires(Transport& t, std::string_view w) { t.note_failure(w); };
  void tell_transport_why() noexcept {  // from a catch block
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

  void cancel_and_trim() noexcept {
    for (auto& a : room_.active) transport_.cancel(a.req);
    room_.active.clear();
    trim();
    if (tracing_) trace_end(true);
  }

  T* address(region r) const {
    switch (r.buffer) {
      case buffer_id::input: return const_cast<T*>(buffers_.input) + r.offset;  // only ever read
      case buffer_id::output: return buffers_.output + r.offset;
      case buffer_id::scratch: return scratch_ + r.offset;
      case buffer_id::staging: return staging_ + r.offset;
    }
    return nullptr;
  }

  std::span<const std::byte> bytes_of(region r) const {
    return {reinterpret_cast<const std::byte*>(address(r)), r.count * sizeof(T)};
  }
  std::span<std::byte> writable_bytes_of(region r) const {
    return {reinterpret_cast<std::byte*>(address(r)), r.count * sizeof(T)};
  }

  void finish(op_id id) {
    ++finished_;
    const auto begin = room_.successor_begin[id], end = room_.successor_begin[id + 1];
    for (auto k = begin; k < end; ++k)
      if (--room_.waiting[room_.successors[k]] == 0) room_.ready.push_back(room_.successors[k]);
  }

  bool start_ready(const call_context& ctx) {
    bool any = false;
    while (next_ready_ < room_.ready.size()) {
      const op_id id = room_.ready[next_ready_++];
      const operation& o = plan_.ops[id];
      any = true;
      const message_tag tag{ctx.call, o.tag};
      switch (o.kind) {
        case op_kind::copy:
          traced(what::copy, o.dst.count, [&] { memory_.copy(address(o.dst), address(o.src), o.dst.count); });
          finish(id);
          break;
        case op_kind::reduce:
          traced(what::reduce, o.dst.count,
                 [&] { memory_.combine(address(o.dst), address(o.src), o.dst.count, op_, o.order); });
          finish(id);
          break;
        case op_kind::finalize:
          if constexpr (has_finalize<Op, T>)
            traced(what::finalize, o.dst.count,
                   [&] { memory_.finalize(address(o.dst), o.dst.count, op_, transport_.size()); });
          finish(id);
          break;
        case op_kind::send:
          if (o.src.count == 0) finish(id);
          else room_.active.push_back({id, post_send(o.peer, tag, bytes_of(o.src))});
          break;
        case op_kind::recv:
          if (o.dst.count == 0) finish(id);
          else room_.active.push_back({id, post_recv(o.peer, tag, writable_bytes_of(o.dst))});
          break;
        case op_kind::recv_reduce:
          if (o.dst.count == 0) finish(id);
          else if constexpr (fused) {
            auto& target = room_.fused.emplace_back(fused_target{address(o.dst), &op_, o.order});
            chunk_sink sink{&target, &detail::reduce_into<T, Op>};
            if (tracing_) trace_reductions_of(target, sink);
            room_.active.push_back({id, transport_.post_recv_reduce(o.peer, tag, o.dst.count * sizeof(T), sizeof(T), sink)});
          } else {
            room_.active.push_back({id, post_recv(o.peer, tag, writable_bytes_of(o.src))});
          }
          break;
      }
      if (tracing_ && !room_.active.empty() && room_.active.back().id == id) trace_message(true, o);
    }
    return any;
  }

  // Messages between buffers of Space: plain ones for host memory, the transport's
  // device messages otherwise.
  request post_send(int peer, message_tag tag, std::span<const std::byte> bytes) {
    if constexpr (std::is_same_v<Space, host_memory>) return transport_.post_send(peer, tag, bytes);
    else return transport_.post_send(peer, tag, bytes, Space{});
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> bytes) {
    if constexpr (std::is_same_v<Space, host_memory>) return transport_.post_recv(peer, tag, bytes);
    else return transport_.post_recv(peer, tag, bytes, Space{});
  }

  bool poll_active() {
    bool any = false;
    for (std::size_t i = 0; i < room_.active.size();) {
      if (!transport_.test(room_.active[i].req)) { ++i; continue; }
      const op_id id = room_.active[i].id;
      room_.active[i] = std::move(room_.active.back());
      room_.active.pop_back();
      const operation& o = plan_.ops[id];
      if (tracing_) trace_message(false, o);
      if (!fused && o.kind == op_kind::recv_reduce)
        traced(what::reduce, o.dst.count,
               [&] { memory_.combine(address(o.dst), address(o.src), o.dst.count, op_, o.order); });
      finish(id);
      any = true;
    }
    return any;
  }

  // ---- The trace (and the DEBUG and TRACE log): one branch on tracing_ while off ----

  // Runs `step`, timed when tracing: a local step over `count` elements, or a wait.
  template <class Step>
  auto traced(what kind, std::size_t count, Step&& step) {
    if (!tracing_) [[likely]]
      return step();
    const std::int64_t began = trace::now_ns();
    if constexpr (std::is_void_v<decltype(step())>) {
      step();
      trace_step(kind, began, trace::now_ns() - began, -1, count * sizeof(T));
    } else {
      auto result = step();
      trace_step(kind, began, trace::now_ns() - began, -1, count * sizeof(T));
      return result;
    }
  }

  void trace_begin() noexcept {
    trace_id_ = trace::enabled() ? trace::recorder::instance().next_call_id() : 0;
    trace_began_ = trace::now_ns();
    trace_sent_ = trace_received_ = 0;
    for (const operation& o : plan_.ops) {
      if (o.kind == op_kind::send) trace_sent_ += o.src.count * sizeof(T);
      if (o.kind == op_kind::recv || o.kind == op_kind::recv_reduce) trace_received_ += o.dst.count * sizeof(T);
    }
  }

  // The call's own event, once: when it finishes, or fails (after its first advance,
  // which names it).
  void trace_end(bool failed) noexcept {
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
    std::strncpy(e.name, trace_context_->name, sizeof e.name - 1);
    if (trace::enabled()) trace::recorder::instance().record(e);
    log_event(log::level::debug, e);
    trace_context_ = nullptr;
  }

  void trace_step(what kind, std::int64_t began, std::int64_t duration, int peer, std::size_t bytes) noexcept {
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

  // An event as a DEBUG or TRACE line; a line that cannot be made (no memory) is left out.
  void log_event(log::level at, const trace::event& e) noexcept {
    if (!log::enabled(at)) return;
    try {
      log::write(at, trace::detail::line_of(e, trace_context_ ? trace_context_->name : "a call"));
    } catch (...) {
    }
  }

  // A fused receive reduces in the transport, piece by piece as its bytes arrive: when
  // tracing, its sink's op is `traced_op_`, which names the call the pieces belong to.
  struct traced_op {
    Op* op;
    executor* self;
  };

  void trace_reductions_of(fused_target& target, chunk_sink& sink) noexcept {
    target.op = &traced_op_;
    sink.consume = [](void* context, std::size_t offset, std::span<const std::byte> piece) {
      const auto& t = *static_cast<const fused_target*>(context);
      const auto& traced = *static_cast<const traced_op*>(t.op);
      const std::int64_t began = trace::now_ns();
      detail::reduce_piece<T>(t, *traced.op, offset, piece);
      traced.self->trace_step(what::reduce, began, trace::now_ns() - began, -1, piece.size());
    };
  }

  // A message posted, or seen complete.
  void trace_message(bool posted, const operation& o) noexcept {
    const bool sending = o.kind == op_kind::send;
    const what kind = posted ? (sending ? what::post_send : what::post_recv)
                             : (sending ? what::complete_send : what::complete_recv);
    trace_step(kind, trace::now_ns(), 0, o.peer, (sending ? o.src.count : o.dst.count) * sizeof(T));
  }

  const schedule& plan_;
  Transport& transport_;
  memory_ops<Space> memory_;
  call_buffers<T, Space> buffers_;
  Op& op_;
  workspace& room_;
  std::size_t next_ready_ = 0, finished_ = 0;
  T* scratch_ = nullptr;
  T* staging_ = nullptr;
  owned_memory owned_scratch_{}, owned_staging_{};
  // Read once per call: the settings do not change under a running call. The log's
  // DEBUG and TRACE lines come from the same points as the timeline's events.
  bool tracing_ = trace::enabled() || log::enabled(log::level::debug);
  traced_op traced_op_{&op_, this};
  const call_context* trace_context_ = nullptr;  // the call's name and number, from its last advance
  std::uint64_t trace_id_ = 0;
  std::int64_t trace_began_ = 0;
  std::size_t trace_sent_ = 0, trace_received_ = 0;
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
