// collectives-run: one trace for the job. With COLLECTIVES_TRACE=<file>, each rank's
// process writes its own part, named with its rank (trace.json -> trace.rank3.json,
// see collectives/trace.hpp); once every rank has exited, the launcher merges the
// parts of its ranks into <file> and removes them. Each part is a whole trace-event
// file whose events are one array, so merging is joining those arrays.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <collectives/trace.hpp>

namespace collectives_run {

// Parts a killed launcher left behind would be merged as this job's: gone before it starts.
inline void remove_trace_parts(const std::string& path, int first_rank, int ranks) {
  for (int rank = first_rank; rank < first_rank + ranks; ++rank)
    std::remove(collectives::trace::part_path(path, rank).c_str());
}

// Merges the parts of ranks [first_rank, first_rank + ranks) into `path`; the line
// that says where the trace is, or why there is none.
inline std::string merge_trace_parts(const std::string& path, int first_rank, int ranks) {
  std::string events;
  std::vector<std::string> merged;
  for (int rank = first_rank; rank < first_rank + ranks; ++rank) {
    const std::string part = collectives::trace::part_path(path, rank);
    std::ifstream in(part);
    if (!in) continue;  // a rank that made no call, or died
    const std::string text{std::istreambuf_iterator<char>(in), {}};
    const auto open = text.find('['), close = text.rfind(']');
    if (open == std::string::npos || close == std::string::npos || close < open)
      return part + " is not a trace file; the parts are left as they are";
    const auto first = text.find_first_not_of(" \n", open + 1), last = text.find_last_not_of(" \n", close - 1);
    if (first < close) {
      if (!events.empty()) events += ",\n";
      events.append(text, first, last + 1 - first);
    }
    merged.push_back(part);
  }
  if (merged.empty()) return "COLLECTIVES_TRACE is set, but no rank wrote a trace";
  std::ofstream out(path, std::ios::trunc);
  out << "{\"traceEvents\":[\n" << events << "\n],\"displayTimeUnit\":\"ns\"}\n";
  out.close();
  if (!out) return "cannot write the trace " + path + ": " + std::strerror(errno) + "; the parts are left as they are";
  for (const std::string& part : merged) std::remove(part.c_str());
  return "the trace of " + std::to_string(merged.size()) + (merged.size() == 1 ? " rank" : " ranks") + " is in " +
         path + " (open it at ui.perfetto.dev)";
}

}  // namespace collectives_run
