// A timeline of calls. With COLLECTIVES_TRACE=<file> (or trace::start(file)), the
// executor records every call and its steps (a send or receive posted, an operation
// seen complete, a local reduce or copy, a wait in the transport) with steady-clock
// timestamps, and the process writes them at exit, or at trace::flush(), as Chrome
// trace-event JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open.
// docs/trace.md says what each event means and what recording costs.
//
// Off, recording costs the executor one predictable branch per event point: it reads
// trace::enabled() once per call. On, an event is a clock read and a store into the
// recording thread's own log; logs are chunks that never move, each with an atomic
// count, so a writer takes no lock and a flush from another thread reads them safely.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config.hpp"
#include "log.hpp"
#include "settings.hpp"

namespace collectives::trace {

enum class what : std::uint8_t {
  call, post_send, post_recv, complete_send, complete_recv, reduce, copy, finalize, wait
};

// One recorded event. Steps carry the id of their call, which ties them to it even
// where call numbers repeat (every point-to-point message has the same one).
struct event {
  std::int64_t start_ns = 0;     // steady clock (CLOCK_MONOTONIC: one time line for all processes of a host)
  std::int64_t duration_ns = 0;  // 0 for the moments: a post, a completion
  std::uint64_t call_id = 0;     // unique in the process
  std::uint64_t call = 0;        // the call number its messages carry
  std::uint64_t bytes = 0;       // a step: the message or region; a call: the bytes it sends
  std::uint64_t received = 0;    // a call: the bytes it receives
  int rank = 0;
  int peer = -1;                 // post, complete
  int size = 0;                  // a call: the ranks of its group
  what kind = what::call;
  bool failed = false;           // a call that ended in an error
  char name[22] = {};            // a call: its name; a copy, since the file is written long after
  const char* algorithm = nullptr;  // a call: the algorithm that planned it (a static name)
};

inline std::int64_t now_ns() noexcept {
  using std::chrono::steady_clock, std::chrono::nanoseconds;
  return std::chrono::duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

// "trace.json" -> "trace.rank3.json", "out/trace" -> "out/trace.rank3": the file of
// the process whose lowest rank is `rank` (collectives-run merges them by this name).
COLLECTIVES_DECL std::string part_path(std::string_view path, int rank);

namespace detail {

// A piece of one thread's log. Only its thread writes; `used` publishes each event.
struct chunk {
  static constexpr std::size_t capacity = 1024;
  event events[capacity];
  std::atomic<std::size_t> used{0};
  std::atomic<chunk*> next{nullptr};
};

struct thread_log {
  std::uint64_t index = 0;  // which thread: the high bits of its call ids
  std::uint64_t calls = 0;
  std::size_t chunks = 1;
  chunk first;
  chunk* last = &first;

  ~thread_log() {
    for (chunk* c = first.next.load(); c != nullptr;) delete std::exchange(c, c->next.load());
  }
};

COLLECTIVES_DECL const char* name_of(what w);
COLLECTIVES_DECL const char* category_of(what w);  // the event's family: Perfetto's "cat"

// One event as a log line (COLLECTIVES_DEBUG=DEBUG shows calls, TRACE their steps too):
// "all_reduce (call 7): post send to rank 1, 4096 bytes".
COLLECTIVES_DECL std::string line_of(const event& e, std::string_view call_name);

// The events as a trace-event file (Chrome's JSON format).
COLLECTIVES_DECL std::string json_of(std::vector<event> events);

}  // namespace detail

// The process's recording: a log per thread that recorded, and where to write them.
class recorder {
 public:
  // Never destroyed: a thread may still record while the process exits.
  static recorder& instance() {
    static recorder& one = *new recorder;
    return one;
  }

  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }

  void start(std::string path) {
    std::lock_guard lock(mutex_);
    path_ = std::move(path);
    if (!exit_hook_) {
      exit_hook_ = std::atexit([] { recorder::instance().write_at_exit(); }) == 0;
      // A rank that ends by an uncaught error (a lost peer's, say) ends in std::terminate,
      // not at exit: write there too, then go on as the program would have.
      previous_terminate_ = std::set_terminate([] {
        recorder& r = recorder::instance();
        r.write_at_exit(std::chrono::seconds(1));
        (r.previous_terminate_ ? r.previous_terminate_ : std::abort)();
      });
    }
    on_.store(true, std::memory_order_relaxed);
  }

  // A fresh id for a call that starts on this thread.
  std::uint64_t next_call_id() noexcept {
    detail::thread_log* log = mine();
    return log ? (log->index << 40) | ++log->calls : 0;
  }

  void record(const event& e) noexcept {
    detail::thread_log* log = mine();
    if (log == nullptr) return;
    detail::chunk* c = log->last;
    std::size_t n = c->used.load(std::memory_order_relaxed);
    if (n == detail::chunk::capacity) {
      if (log->chunks == max_chunks_per_thread) return lost_events();
      auto* fresh = new (std::nothrow) detail::chunk;
      if (fresh == nullptr) return lost_events();
      ++log->chunks;
      c->next.store(fresh, std::memory_order_release);
      log->last = c = fresh;
      n = 0;
    }
    c->events[n] = e;
    c->used.store(n + 1, std::memory_order_release);
  }

  // Writes every finished call recorded so far to the file of this process (a step of
  // a call still running waits for the next write); the file's path, or "" if nothing
  // was recorded. Throws std::system_error when the file cannot be written.
  COLLECTIVES_DECL std::string write();

 private:
  recorder() {
    if (auto path = settings::text("COLLECTIVES_TRACE")) start(std::move(*path));
  }

  // About 370 MB of events per thread; past it the rest of a long run is left out.
  static constexpr std::size_t max_chunks_per_thread = 4096;

  // The calling thread's log, made at its first event; null only without memory.
  detail::thread_log* mine() noexcept {
    thread_local detail::thread_log* log = nullptr;
    if (log != nullptr) [[likely]]
      return log;
    std::lock_guard lock(mutex_);
    auto fresh = std::unique_ptr<detail::thread_log>(new (std::nothrow) detail::thread_log);
    if (fresh == nullptr) return nullptr;
    fresh->index = logs_.size() + 1;
    log = fresh.get();
    try {
      logs_.push_back(std::move(fresh));
    } catch (...) {
      log = nullptr;
    }
    return log;
  }

  void lost_events() noexcept {
    if (!warned_full_.exchange(true))
      log::warn("COLLECTIVES_TRACE: a thread's log is full (or memory ran out); later events are not recorded");
  }

  // At exit, or from std::terminate: then only if the lock comes within `patience`,
  // since the thread that ends the program may be the one that holds it.
  void write_at_exit(std::chrono::milliseconds patience = std::chrono::milliseconds::max()) noexcept {
    try {
      std::unique_lock lock(mutex_, std::defer_lock);
      if (patience == std::chrono::milliseconds::max()) lock.lock();
      else if (!lock.try_lock_for(patience)) return;
      write_locked();
    } catch (const std::exception& e) {
      log::warn(e.what());
    }
  }
  COLLECTIVES_DECL std::string write_locked();

  std::atomic<bool> on_{false};
  std::atomic<bool> warned_full_{false};
  std::timed_mutex mutex_;  // the list of logs and the path: taken at a thread's first event and when writing
  std::vector<std::unique_ptr<detail::thread_log>> logs_;
  std::string path_;
  bool exit_hook_ = false;
  std::terminate_handler previous_terminate_ = nullptr;
};

// Whether calls are being recorded (COLLECTIVES_TRACE, read at the first call).
inline bool enabled() noexcept { return recorder::instance().on(); }

// Records from now on, into `path` (as COLLECTIVES_TRACE=path would).
inline void start(std::string path) { recorder::instance().start(std::move(path)); }

// Writes the file now (it is written again at exit, with what came since).
inline std::string flush() { return recorder::instance().write(); }

}  // namespace collectives::trace

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "trace.ipp"
#endif
