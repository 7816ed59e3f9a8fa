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
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

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
};

inline std::int64_t now_ns() noexcept {
  using std::chrono::steady_clock, std::chrono::nanoseconds;
  return std::chrono::duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
}

// "trace.json" -> "trace.rank3.json", "out/trace" -> "out/trace.rank3": the file of
// the process whose lowest rank is `rank` (collectives-run merges them by this name).
inline std::string part_path(std::string_view path, int rank) {
  const auto slash = path.rfind('/');
  auto dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash) || dot == slash + 1)
    dot = path.size();  // no extension (or a hidden file's leading dot)
  return std::string(path.substr(0, dot)) + ".rank" + std::to_string(rank) + std::string(path.substr(dot));
}

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

inline const char* name_of(what w) {
  switch (w) {
    case what::call: return "call";
    case what::post_send: return "post send";
    case what::post_recv: return "post recv";
    case what::complete_send: return "complete send";
    case what::complete_recv: return "complete recv";
    case what::reduce: return "reduce";
    case what::copy: return "copy";
    case what::finalize: return "finalize";
    case what::wait: return "wait";
  }
  return "";
}

// The event's family: Perfetto's "cat", and what tools filter by.
inline const char* category_of(what w) {
  switch (w) {
    case what::post_send:
    case what::post_recv: return "post";
    case what::complete_send:
    case what::complete_recv: return "complete";
    default: return name_of(w);
  }
}

// Nanoseconds as the microseconds the format counts, exactly: "12.345".
// A name, then a number. Appended in two steps: g++ 12 warns wrongly (-Wrestrict) on
// "..." + std::to_string(...) once it inlines it in some places.
template <class Number>
void append_field(std::string& out, std::string_view name, Number value) {
  out += name;
  out += std::to_string(value);
}

inline void append_us(std::string& out, std::int64_t ns) {
  char text[40];
  const int n = std::snprintf(text, sizeof text, "%lld.%03lld", static_cast<long long>(ns / 1000),
                              static_cast<long long>(ns % 1000));
  out.append(text, static_cast<std::size_t>(n));
}

inline void append_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= ' ') out += c;
  }
  out += '"';
}

// One event as a log line (COLLECTIVES_DEBUG=DEBUG shows calls, TRACE their steps too):
// "all_reduce (call 7): post send to rank 1, 4096 bytes".
inline std::string line_of(const event& e, std::string_view call_name) {
  std::string line = "rank ";
  line += std::to_string(e.rank);
  line += ": ";
  line += call_name;
  line += " (call ";
  line += std::to_string(e.call);
  line += "): ";
  if (e.kind == what::call) {
    line += e.failed ? "failed after " : "finished in ";
    append_us(line, e.duration_ns);
    line += " us, ";
    line += std::to_string(e.bytes);
    line += " bytes sent, ";
    line += std::to_string(e.received);
    line += " received";
    return line;
  }
  line += name_of(e.kind);
  if (e.peer >= 0) {
    line += e.kind == what::post_send || e.kind == what::complete_send ? " to rank " : " from rank ";
    line += std::to_string(e.peer);
  }
  if (e.kind != what::wait) {
    line += ", ";
    line += std::to_string(e.bytes);
    line += " bytes";
  }
  if (e.duration_ns > 0) {
    line += ", ";
    append_us(line, e.duration_ns);
    line += " us";
  }
  return line;
}

// The events as a trace-event file. A call's steps share its row ("tid"); calls in
// flight at the same time get rows of their own, since the format only draws slices
// of one row that nest. Rows are given out here, when the whole picture is known:
// each call takes the first row of its rank that is free when it starts.
inline std::string json_of(std::vector<event> events) {
  std::sort(events.begin(), events.end(), [](const event& a, const event& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.kind < b.kind;
  });
  std::unordered_map<std::uint64_t, int> row_of_call;
  std::vector<std::pair<int, int>> rows_of_rank;  // (rank, rows it uses)
  std::vector<std::int64_t> row_free_at;
  for (const event& e : events) {
    if (rows_of_rank.empty() || rows_of_rank.back().first != e.rank) {
      rows_of_rank.push_back({e.rank, 0});
      row_free_at.clear();
    }
    if (e.kind != what::call) continue;
    std::size_t row = 0;
    while (row < row_free_at.size() && row_free_at[row] > e.start_ns) ++row;
    if (row == row_free_at.size()) row_free_at.push_back(0);
    row_free_at[row] = e.start_ns + e.duration_ns;
    row_of_call[e.call_id] = static_cast<int>(row);
    rows_of_rank.back().second = std::max(rows_of_rank.back().second, static_cast<int>(row) + 1);
  }

  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  const auto begin = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const auto& [rank, rows] : rows_of_rank) {
    const std::string pid = std::to_string(rank);
    begin();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid +
           ",\"tid\":0,\"args\":{\"name\":\"rank " + pid + "\"}}";
    begin();
    out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid +
           ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}";
    for (int row = 0; row < rows; ++row) {
      std::string row_name = "calls";
      if (row > 0) append_field(row_name, " ", row + 1);
      begin();
      out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(row) +
             ",\"args\":{\"name\":\"" + row_name + "\"}}";
    }
  }
  for (const event& e : events) {
    const auto row = row_of_call.find(e.call_id);
    if (row == row_of_call.end()) continue;  // a step of a call still running: written once it ends
    begin();
    out += "{\"name\":";
    append_string(out, e.kind == what::call ? std::string_view(e.name) : std::string_view(name_of(e.kind)));
    out += ",\"cat\":\"";
    out += category_of(e.kind);
    out += "\",\"ph\":\"X\",\"ts\":";
    append_us(out, e.start_ns);
    out += ",\"dur\":";
    append_us(out, e.duration_ns);
    append_field(out, ",\"pid\":", e.rank);
    append_field(out, ",\"tid\":", row->second);
    append_field(out, ",\"args\":{\"call\":", e.call);
    if (e.kind == what::call) {
      append_field(out, ",\"size\":", e.size);
      append_field(out, ",\"sent\":", e.bytes);
      append_field(out, ",\"received\":", e.received);
      if (e.failed) out += ",\"failed\":true";
    } else if (e.kind != what::wait) {
      if (e.peer >= 0) append_field(out, ",\"peer\":", e.peer);
      append_field(out, ",\"bytes\":", e.bytes);
    }
    out += "}}";
  }
  out += "\n],\"displayTimeUnit\":\"ns\"}\n";
  return out;
}

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
    if (!exit_hook_) exit_hook_ = std::atexit([] { recorder::instance().write_at_exit(); }) == 0;
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
  std::string write() {
    std::lock_guard lock(mutex_);
    std::vector<event> events;
    for (const auto& log : logs_)
      for (const detail::chunk* c = &log->first; c != nullptr; c = c->next.load(std::memory_order_acquire))
        events.insert(events.end(), c->events, c->events + c->used.load(std::memory_order_acquire));
    if (events.empty() || path_.empty()) return {};
    const int lowest = std::min_element(events.begin(), events.end(), [](const event& a, const event& b) {
                         return a.rank < b.rank;
                       })->rank;
    const std::string path = part_path(path_, lowest);
    const std::string text = detail::json_of(std::move(events));
    std::FILE* file = std::fopen(path.c_str(), "w");
    if (file == nullptr) throw std::system_error(errno, std::generic_category(), "cannot write the trace " + path);
    const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    if (std::fclose(file) != 0 || !written)
      throw std::system_error(errno, std::generic_category(), "cannot write the trace " + path);
    return path;
  }

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

  void write_at_exit() noexcept {
    try {
      write();
    } catch (const std::exception& e) {
      log::warn(e.what());
    }
  }

  std::atomic<bool> on_{false};
  std::atomic<bool> warned_full_{false};
  std::mutex mutex_;  // the list of logs and the path: taken at a thread's first event and when writing
  std::vector<std::unique_ptr<detail::thread_log>> logs_;
  std::string path_;
  bool exit_hook_ = false;
};

// Whether calls are being recorded (COLLECTIVES_TRACE, read at the first call).
inline bool enabled() noexcept { return recorder::instance().on(); }

// Records from now on, into `path` (as COLLECTIVES_TRACE=path would).
inline void start(std::string path) { recorder::instance().start(std::move(path)); }

// Writes the file now (it is written again at exit, with what came since).
inline std::string flush() { return recorder::instance().write(); }

}  // namespace collectives::trace
