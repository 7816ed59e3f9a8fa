// Warnings that a stranger can cause (each refused connection), limited so that a
// flood of them cannot flood the log: the first few of each window print as they
// come; the rest are counted, and one line says how many were left out, when the next
// window's first warning comes or when the limiter ends.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "../log.hpp"

namespace collectives::bootstrap {

class limited_warnings {
 public:
  using clock = std::chrono::steady_clock;

  // `what` names the warnings in the summary line ("store on 29500: refused
  // connections"); at most `burst` of them print in each `window`.
  explicit limited_warnings(std::string what, std::size_t burst = 5, clock::duration window = std::chrono::seconds(10))
      : what_(std::move(what)), burst_(burst), window_(window) {}
  limited_warnings(const limited_warnings&) = delete;
  limited_warnings& operator=(const limited_warnings&) = delete;
  ~limited_warnings() { summarize(); }

  void warn(std::string_view line) {
    const std::lock_guard lock(mutex_);
    const auto now = clock::now();
    if (now - window_start_ >= window_) {
      summarize_locked();
      window_start_ = now;
      shown_ = 0;
    }
    if (shown_ < burst_) {
      ++shown_;
      log::warn(line);
    } else {
      ++left_out_;
    }
  }

  // Renames the warnings for the summary line (a server learns its port late).
  void name(std::string what) {
    const std::lock_guard lock(mutex_);
    what_ = std::move(what);
  }

  // Says how many were left out since the last summary, if any.
  void summarize() {
    const std::lock_guard lock(mutex_);
    summarize_locked();
  }

 private:
  void summarize_locked() {
    if (!left_out_) return;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(window_).count();
    const std::string window = ms % 1000 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s";
    log::warn(what_ + ": " + std::to_string(left_out_) + " more not shown (at most " + std::to_string(burst_) +
              " lines per " + window + ")");
    left_out_ = 0;
  }

  std::mutex mutex_;
  std::string what_;
  std::size_t burst_;
  clock::duration window_;
  clock::time_point window_start_{};
  std::size_t shown_ = 0, left_out_ = 0;
};

}  // namespace collectives::bootstrap
