// For ranks that are threads of one process: a counter all of them share, for tests
// that watch the ranks from outside.
#pragma once

#include <atomic>
#include <string>

namespace testing {

// A counter all ranks share, for tests that watch the ranks from outside.
class shared_counter {
 public:
  explicit shared_counter(const std::string& /*name*/) {}
  int fetch_add(int n) { return value_.fetch_add(n); }
  int load() const { return value_.load(); }

 private:
  std::atomic<int> value_{0};
};

}  // namespace testing
