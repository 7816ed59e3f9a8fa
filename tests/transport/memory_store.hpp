// A store for ranks that are threads of one test process: a map under a mutex. The
// TCP transport meets its peers through it exactly as through a TCP or file store.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include <collectives/bootstrap/store.hpp>

namespace testing {

class memory_store final : public collectives::bootstrap::key_value_store {
 public:
  void set(const std::string& key, const std::string& value) override {
    { std::lock_guard lock(mutex_); values_[key] = value; }
    changed_.notify_all();
  }
  std::string get(const std::string& key, collectives::deadline until) override {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, until, [&] { return values_.count(key) > 0; }))
      throw collectives::error(collectives::errc::timeout, "memory_store: no key " + key);
    return values_[key];
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t now;
    {
      std::lock_guard lock(mutex_);
      auto& v = values_[key];
      now = (v.empty() ? 0 : std::stoll(v)) + delta;
      v = std::to_string(now);
    }
    changed_.notify_all();
    return now;
  }
  void wait(const std::vector<std::string>& keys, collectives::deadline until) override {
    for (const auto& k : keys) get(k, until);
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard lock(mutex_);
    for (const auto& k : keys)
      if (!values_.count(k)) return false;
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace testing
