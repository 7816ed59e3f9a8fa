// What rank 0 prints: nccl-tests' header, one row per size, and its footer; and one
// JSON object per row for bench/compare. Plain standard C++, shared with the Open MPI
// twin, so both programs' figures read and parse the same way.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "collective.hpp"
#include "options.hpp"

namespace perf {

// Who ran and how: the header and every JSON line carry it.
struct run_description {
  std::string program;      // "collectives" or "openmpi"
  std::string transport;    // the one actually in use ("shm", "tcp", "vader", ...)
  std::string transport_detail;
  std::string algorithm;    // "ring", "tree", "direct", "auto"
  int ranks = 1;
};

struct row {
  std::size_t bytes = 0, count = 0;
  std::string_view type, op;
  int root = -1;  // -1: the collective has none
  double time_us = 0, algbw_GBps = 0, busbw_GBps = 0;
  long long wrong = -1;  // -1: not checked
};

// A string as a JSON string's contents (the --transport label is the user's).
inline std::string json_escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", unsigned(c));
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

class reporter {
 public:
  // Only rank 0 reports; the others get an inactive reporter.
  reporter(bool active, const options& o, run_description d) : active_(active), opts_(o), run_(std::move(d)) {}
  reporter(const reporter&) = delete;
  reporter& operator=(const reporter&) = delete;
  ~reporter() {
    if (json_) std::fclose(json_);
  }

  // Opens --json for appending; false (with a message) if it can't.
  bool open_json() {
    if (!active_ || opts_.json_path.empty()) return true;
    json_ = std::fopen(opts_.json_path.c_str(), "a");
    if (!json_) std::fprintf(stderr, "%s_perf: cannot open --json %s for appending\n", name().data(), opts_.json_path.c_str());
    return json_ != nullptr;
  }

  void header() const {
    if (!active_) return;
    const collective c = opts_.which;
    std::printf("# %s %s_perf: %d rank%s, transport %s, algorithm %s, %s\n", run_.program.c_str(), name().data(),
                run_.ranks, run_.ranks == 1 ? "" : "s", run_.transport.c_str(), run_.algorithm.c_str(),
                opts_.in_place ? "in-place" : "out-of-place");
    if (!run_.transport_detail.empty()) std::printf("#   %s\n", run_.transport_detail.c_str());
#if defined(COLLECTIVES_PROGRAMS_FOR_TESTS)
    std::printf("#   built for the tests at -O1 (COLLECTIVES_PROGRAMS_FOR_TESTS): not for figures\n");
#endif
    std::printf("# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d\n",
                opts_.min_bytes, opts_.max_bytes, opts_.step_factor > 1 ? opts_.step_factor : opts_.step_bytes,
                opts_.step_factor > 1 ? "factor" : "bytes", opts_.warmup_iterations, opts_.iterations,
                opts_.check ? 1 : 0);
    if (opts_.timed_batches() > 1)
      std::printf("# time: a barrier, then %d calls back to back in %d batches, the median batch per call; the slowest rank's time\n",
                  opts_.iterations, opts_.timed_batches());
    else
      std::printf("# time: a barrier, then %d calls back to back timed as one, per call; the slowest rank's time\n",
                  opts_.iterations);
    std::printf("# algbw = size / time, busbw = algbw * %s (P = ranks)\n#\n", bus_bandwidth_formula(c).c_str());
    std::printf("#       size         count      type   redop    root     time(us)   algbw(GB/s)   busbw(GB/s)  #wrong\n");
    std::printf("#        (B)    (elements)\n");
    std::fflush(stdout);
  }

  void add(const row& r) {
    wrong_ += r.wrong > 0 ? r.wrong : 0;
    busbw_sum_ += r.busbw_GBps;
    ++rows_;
    if (!active_) return;
    const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
    std::printf("%12zu%14zu%10.*s%8.*s%8d%13.2f%14.3f%14.3f%8s\n", r.bytes, r.count, int(r.type.size()), r.type.data(),
                int(r.op.size()), r.op.data(), r.root, r.time_us, r.algbw_GBps, r.busbw_GBps, wrong.c_str());
    std::fflush(stdout);
    if (json_) {
      std::fprintf(json_,
                   "{\"program\":\"%s\",\"collective\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"algo\":\"%s\","
                   "\"bytes\":%zu,\"count\":%zu,\"type\":\"%.*s\",\"op\":\"%.*s\",\"root\":%d,\"in_place\":%s,"
                   "\"time_us\":%.3f,\"algbw_GBps\":%.6f,\"busbw_GBps\":%.6f,\"wrong\":%s}\n",
                   run_.program.c_str(), name().data(), run_.ranks, json_escaped(run_.transport).c_str(),
                   json_escaped(run_.algorithm).c_str(),
                   r.bytes, r.count, int(r.type.size()), r.type.data(), int(r.op.size()), r.op.data(), r.root,
                   opts_.in_place ? "true" : "false", r.time_us, r.algbw_GBps, r.busbw_GBps,
                   r.wrong < 0 ? "null" : wrong.c_str());
      std::fflush(json_);
    }
  }

  void footer() const {
    if (!active_) return;
    if (opts_.check) std::printf("# Out of bounds values : %lld %s\n", wrong_, wrong_ ? "FAILED" : "OK");
    else std::printf("# Out of bounds values : N/A (not checked, -c 0)\n");
    std::printf("# Avg bus bandwidth    : %g\n#\n", rows_ ? busbw_sum_ / rows_ : 0.0);
    std::fflush(stdout);
  }

  long long wrong() const { return wrong_; }

 private:
  std::string_view name() const { return name_of(opts_.which); }

  bool active_;
  const options& opts_;
  run_description run_;
  std::FILE* json_ = nullptr;
  long long wrong_ = 0;
  double busbw_sum_ = 0;
  int rows_ = 0;
};

}  // namespace perf
