// The matching engine's bytes on a device (see host_bytes in detail/matching.hpp):
// copies are enqueued on the device runtime's stream, and early messages are kept in
// device memory. A buffer the engine gives back may still be read by a copy under
// way, so it is reused, or freed, only once a marker made after that copy is reached.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "../../concepts/device_runtime.hpp"

namespace collectives::device_ipc_detail {

template <class Runtime>
class device_bytes {
 public:
  struct buffer {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
  };

  explicit device_bytes(Runtime& runtime) : runtime_(&runtime) {}
  device_bytes(device_bytes&&) noexcept = default;  // a moved-from one owns nothing
  device_bytes& operator=(device_bytes&&) = delete;
  ~device_bytes() {
    if (owned_.empty()) return;
    runtime_->synchronize();
    for (retired& r : retired_) runtime_->forget(r.copied);
    for (std::byte* p : owned_) runtime_->free(p);
  }

  static std::byte* data(buffer& b) { return b.data; }
  void copy(std::byte* to, const std::byte* from, std::size_t n) {
    if (n != 0) runtime_->copy(to, from, n);
  }

  // A buffer given back earlier that fits and is free, else a new one; the free ones
  // that do not fit are returned to the device first.
  buffer take(std::size_t bytes) {
    if (bytes == 0) return {};
    for (auto r = retired_.begin(); r != retired_.end(); ++r)
      if (r->b.capacity >= bytes && runtime_->reached(r->copied)) {
        const buffer b = r->b;
        runtime_->forget(r->copied);
        retired_.erase(r);
        return b;
      }
    std::erase_if(retired_, [&](retired& r) {
      if (!runtime_->reached(r.copied)) return false;
      runtime_->forget(r.copied);
      runtime_->free(r.b.data);
      std::erase(owned_, r.b.data);
      return true;
    });
    auto* p = static_cast<std::byte*>(runtime_->allocate(bytes));
    owned_.push_back(p);
    return {p, bytes};
  }

  void give_back(buffer&& b) {
    if (b.data != nullptr) retired_.push_back({b, runtime_->mark()});
  }

 private:
  struct retired {
    buffer b;
    typename Runtime::marker copied;  // reached once the copies made before it was given back are done
  };

  Runtime* runtime_;
  std::vector<std::byte*> owned_;  // every block taken from the device, in use or retired
  std::vector<retired> retired_;
};

}  // namespace collectives::device_ipc_detail
