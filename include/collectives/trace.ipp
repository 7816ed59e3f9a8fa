// The trace's file and log lines (trace.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "trace.hpp"

namespace collectives::trace {

std::string part_path(std::string_view path, int rank) {
  const auto slash = path.rfind('/');
  auto dot = path.rfind('.');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash) || dot == slash + 1)
    dot = path.size();  // no extension (or a hidden file's leading dot)
  return std::string(path.substr(0, dot)) + ".rank" + std::to_string(rank) + std::string(path.substr(dot));
}

namespace detail {

const char* name_of(what w) {
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
const char* category_of(what w) {
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
std::string line_of(const event& e, std::string_view call_name) {
  std::string line = "rank ";
  line += std::to_string(e.rank);
  line += ": ";
  line += call_name;
  line += " (call ";
  line += std::to_string(e.call);
  if (e.kind == what::call && e.algorithm) {
    line += ", ";
    line += e.algorithm;
  }
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
std::string json_of(std::vector<event> events) {
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
      if (e.algorithm) {
        out += ",\"algorithm\":";
        append_string(out, e.algorithm);
      }
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

std::string recorder::write() {
  std::lock_guard lock(mutex_);
  return write_locked();
}

std::string recorder::write_locked() {
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

}  // namespace collectives::trace
