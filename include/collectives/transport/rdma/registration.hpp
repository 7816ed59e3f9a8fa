// Memory registration: the engine's own buffers, registered once, and a cache of the
// users' buffers, so that a buffer passed to call after call is registered once.
//
// Each provider says what registration it needs (fi_info's mr_mode), and this honours
// each bit: FI_MR_LOCAL (local buffers carry their descriptor), FI_MR_VIRT_ADDR (a
// remote address is the virtual address, else the offset into the registration),
// FI_MR_PROV_KEY (the provider picks keys, else this picks unique ones), FI_MR_ALLOCATED
// (only allocated memory: registrations are whole pages of the buffer's own mapping)
// and FI_MR_ENDPOINT (each registration is bound to the endpoint and enabled).
//
// The cache keeps the last `capacity` registrations it made. Memory that goes away
// (memory_monitor.hpp) drops its registrations, so that a new allocation at the same
// address is registered afresh; where the monitor can't watch a buffer, its
// registration serves one transfer only. A registration in use by a transfer is closed
// only once the transfer is over.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>

#include "fabric.hpp"
#include "memory_monitor.hpp"

namespace collectives::rdma_detail {

// One registration: its descriptor for local use and its key and base for peers.
class registration {
 public:
  registration() = default;
  registration(const endpoint& ep, const void* begin, std::size_t bytes, std::uint64_t access, std::uint64_t requested_key)
      : base_(reinterpret_cast<std::uintptr_t>(begin)), virt_addr_((ep.mr_mode() & FI_MR_VIRT_ADDR) != 0) {
    fid_mr* mr = nullptr;
    const int rc = fi_mr_reg(ep.domain(), begin, bytes, access, 0, requested_key, 0, &mr, nullptr);
    if (rc != 0) fail(errc::invalid_config, "fi_mr_reg of " + std::to_string(bytes) + " bytes", rc);
    mr_.reset(mr);
    if (ep.mr_mode() & FI_MR_ENDPOINT) {
      check(fi_mr_bind(mr_.get(), &ep.ep()->fid, 0), "fi_mr_bind");
      check(fi_mr_enable(mr_.get()), "fi_mr_enable");
    }
    desc_ = fi_mr_desc(mr_.get());
    key_ = fi_mr_key(mr_.get());
  }

  void* desc() const { return desc_; }
  std::uint64_t key() const { return key_; }
  // Where a peer reads `p`, which lies in this registration.
  std::uint64_t remote_address(const void* p) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return virt_addr_ ? std::uint64_t(a) : std::uint64_t(a - base_);
  }

 private:
  fid_ptr<fid_mr> mr_;
  void* desc_ = nullptr;
  std::uint64_t key_ = 0;
  std::uintptr_t base_ = 0;
  bool virt_addr_ = false;
};

// Keys this process asks for where the provider does not pick them: unique per process.
inline std::uint64_t next_requested_key() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

class registration_cache {
 public:
  struct counters {
    std::uint64_t hits = 0, misses = 0, invalidated = 0, evicted = 0;
  };

 private:
  struct entry {
    std::uintptr_t begin = 0, end = 0;
    registration reg;
    int users = 0;
    bool stale = false;  // its memory went away, or it serves one transfer only
  };

 public:
  // A registration lent to a transfer until it is given back.
  class lease {
   public:
    lease() = default;
    const registration* operator->() const { return &it_->reg; }
    explicit operator bool() const { return held_; }

   private:
    friend class registration_cache;
    std::list<entry>::iterator it_{};
    bool held_ = false;
  };

  registration_cache(const endpoint& ep, std::size_t capacity) : ep_(ep), capacity_(capacity), monitor_(memory_monitor::get()) {
    if (monitor_) seen_ = monitor_->events();
  }
  registration_cache(const registration_cache&) = delete;
  registration_cache& operator=(const registration_cache&) = delete;

  // A registration covering [p, p + bytes), for reads by peers and RMA reads into it.
  lease acquire(const void* p, std::size_t bytes) {
    forget_what_went_away();
    const auto b = reinterpret_cast<std::uintptr_t>(p), e = b + bytes;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->stale || b < it->begin || e > it->end) continue;
      ++counts_.hits;
      entries_.splice(entries_.begin(), entries_, it);  // most recently used first
      return lend(entries_.begin());
    }
    ++counts_.misses;
    const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t begin = b / page * page, end = (e + page - 1) / page * page;
    const std::uint64_t key = (ep_.mr_mode() & FI_MR_PROV_KEY) ? 0 : next_requested_key();
    entries_.push_front({begin, end, registration(ep_, reinterpret_cast<const void*>(begin), end - begin,
                                                  FI_READ | FI_REMOTE_READ, key)});
    entries_.front().stale = !(monitor_ && monitor_->watch(begin, end));
    evict_beyond_capacity();
    return lend(entries_.begin());
  }

  void give_back(lease& l) noexcept {
    if (!l.held_) return;
    l.held_ = false;
    if (--l.it_->users == 0 && l.it_->stale) entries_.erase(l.it_);
  }

  // Closes the lease's registration now, though other transfers may share it, and gives
  // it back: a send given up halfway, whose memory must no longer be readable.
  void revoke(lease& l) noexcept {
    if (!l.held_) return;
    l.it_->reg = registration();
    if (!l.it_->stale) ++counts_.invalidated;
    l.it_->stale = true;
    give_back(l);
  }

  const counters& counts() const { return counts_; }
  // Whether buffers are kept registered between transfers (memory_monitor.hpp).
  bool keeps_registrations() const { return monitor_ != nullptr; }
  std::size_t size() const { return entries_.size(); }

 private:
  lease lend(std::list<entry>::iterator it) {
    ++it->users;
    lease l;
    l.it_ = it;
    l.held_ = true;
    return l;
  }

  void forget_what_went_away() {
    if (!monitor_) return;
    const std::uint64_t now = monitor_->events();
    for (; seen_ < now; ++seen_) {
      address_range r;
      if (!monitor_->event(seen_, r)) {  // more went away than the ring holds: start over
        invalidate([](const entry&) { return true; });
        seen_ = monitor_->events();
        return;
      }
      invalidate([&](const entry& e) { return r.overlaps(e.begin, e.end); });
    }
  }

  template <class Pred>
  void invalidate(Pred gone) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->stale || !gone(*it)) {
        ++it;
        continue;
      }
      ++counts_.invalidated;
      it->stale = true;
      it = it->users == 0 ? entries_.erase(it) : std::next(it);
    }
  }

  void evict_beyond_capacity() {
    std::size_t kept = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->stale || it->users > 0 || ++kept <= capacity_) {
        ++it;
        continue;
      }
      ++counts_.evicted;
      it = entries_.erase(it);
    }
  }

  const endpoint& ep_;
  std::size_t capacity_;
  memory_monitor* monitor_;
  std::uint64_t seen_ = 0;
  std::list<entry> entries_;  // most recently used first
  counters counts_;
};

}  // namespace collectives::rdma_detail
