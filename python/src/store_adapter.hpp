// The store torch hands a process group (a c10d::Store, usually a PrefixStore over
// torchrun's TCPStore), seen as the library's key_value_store, so that the transports
// meet through it as they meet through a store of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <collectives/bootstrap/store.hpp>

namespace collectives_torch {

class c10d_store_adapter final : public collectives::bootstrap::key_value_store {
 public:
  explicit c10d_store_adapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    collectives::bootstrap::check_store_sizes(key, value.size());
    store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
  }

  // torch's get waits by the store's own timeout; waiting first keeps to `until`.
  std::string get(const std::string& key, collectives::deadline until) override {
    wait({key}, until);
    const auto value = store_->get(key);
    return std::string(value.begin(), value.end());
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override { return store_->add(key, delta); }

  void wait(const std::vector<std::string>& keys, collectives::deadline until) override {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - collectives::clock::now());
    try {
      // torch reads a zero timeout as "the store's default": wait at least 1 ms.
      store_->wait(keys, std::max(left, std::chrono::milliseconds(1)));
    } catch (const c10::Error& e) {  // its what() carries a backtrace
      throw collectives::error(collectives::errc::timeout, "torch's store: key '" +
                                                               (keys.empty() ? std::string() : keys.front()) +
                                                               "' was not set in time: " + e.what_without_backtrace());
    }
  }

  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace collectives_torch
