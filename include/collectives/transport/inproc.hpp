// In-process transport: the ranks are threads of one process and a message is read
// straight out of the sender's buffer by the receiver (one copy, or none when the
// receiver reduces it on the spot). The reference transport for tests, and useful to
// engines that drive one device per thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"

namespace collectives {

class inproc;

// The state the ranks of one in-process group share. Create it, then hand
// transport(r) to the thread of rank r (or let run_ranks do both).
class inproc_group {
 public:
  explicit inproc_group(int size) {
    if (size < 1) throw error(errc::invalid_group, "inproc_group: a group needs at least one rank, got " + std::to_string(size));
    for (int r = 0; r < size; ++r) mailboxes_.push_back(std::make_unique<mailbox>());
  }
  inproc_group(const inproc_group&) = delete;
  inproc_group& operator=(const inproc_group&) = delete;

  int size() const { return static_cast<int>(mailboxes_.size()); }
  inline inproc transport(int rank);

  void abort() {
    aborted_.store(true);
    for (auto& box : mailboxes_) box->wake();
  }
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

 private:
  friend class inproc;

  // What a posted send leaves for its receiver; the sender waits on `state`.
  enum class send_status : int { pending, delivered, refused, failed };
  struct send_state {
    std::atomic<send_status> status{send_status::pending};
    std::size_t expected_bytes = 0;  // what the receiver posted, when it refused
  };
  struct posted_send {
    int source;
    message_tag tag;
    std::span<const std::byte> data;
    send_state* state;
  };

  // One per rank: sends addressed to it, and a flag that wakes it.
  struct mailbox {
    std::mutex mutex;
    std::condition_variable wakeup;
    std::atomic<bool> activity{false};  // set under `mutex`; read without it while spinning
    std::deque<posted_send> arrived;

    void wake() {
      { std::lock_guard lock(mutex); activity.store(true, std::memory_order_release); }
      wakeup.notify_one();
    }
  };

  std::vector<std::unique_ptr<mailbox>> mailboxes_;
  std::atomic<bool> aborted_{false};
};

class inproc {
 public:
  // Posting a message costs a lock and a wake-up; moving it costs one memcpy.
  static constexpr link_costs costs{.latency_s = 4e-6, .per_message_s = 1e-6,
                                    .seconds_per_byte = 1.0 / 8e9, .reduce_seconds_per_byte = 1.0 / 8e9};

  static constexpr std::chrono::microseconds poll_time{20};

  // A handle on one posted operation; the state it refers to lives in the transport.
  struct request {
    std::uint32_t slot = UINT32_MAX;
  };

  inproc(inproc_group& group, int rank) : group_(&group), rank_(rank) {
    if (rank < 0 || rank >= group.size())
      throw error(errc::invalid_peer, "inproc: rank " + std::to_string(rank) + " is not in a group of " +
                                          std::to_string(group.size()));
  }
  inproc(inproc&&) noexcept = default;
  inproc& operator=(inproc&&) noexcept = default;

  int rank() const { return rank_; }
  int size() const { return group_->size(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    check_peer(peer);
    auto [slot, op] = take_slot();
    op.type = op_type::send;
    op.peer = peer;
    op.state.status.store(inproc_group::send_status::pending, std::memory_order_relaxed);
    auto& box = *group_->mailboxes_[peer];
    {
      std::lock_guard lock(box.mutex);
      box.arrived.push_back({rank_, tag, data, &op.state});
      box.activity.store(true, std::memory_order_release);
    }
    box.wakeup.notify_one();
    return {slot};
  }

  request post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    check_peer(peer);
    auto [slot, op] = take_slot();
    op.type = op_type::recv;
    op.peer = peer;
    op.tag = tag;
    op.into = into;
    op.bytes = into.size();
    return {slot};
  }

  // Fused receive: `sink` reads the bytes straight from the sender's buffer.
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t /*granule*/, chunk_sink sink) {
    check_peer(peer);
    auto [slot, op] = take_slot();
    op.type = op_type::recv_reduce;
    op.peer = peer;
    op.tag = tag;
    op.sink = sink;
    op.bytes = bytes;
    return {slot};
  }

  bool test(request& r) {
    pending_op& op = *slots_[r.slot];
    if (group_->aborted()) throw error(errc::aborted, "rank " + std::to_string(rank_) + ": the group was aborted");
    const bool done = op.type == op_type::send ? test_send(op) : test_receive(op);
    if (done) release(r);
    return done;
  }

  // Polls briefly before sleeping: a peer's answer often comes within microseconds,
  // sooner than a sleeping thread is woken. The poll yields the core on every turn,
  // so ranks that outnumber the cores still make progress.
  bool wait_for_activity(deadline until) {
    auto& box = *group_->mailboxes_[rank_];
    const auto poll_until = std::min(until, clock::now() + poll_time);
    do {
      if (box.activity.exchange(false, std::memory_order_acq_rel)) return true;
      std::this_thread::yield();
    } while (clock::now() < poll_until);
    std::unique_lock lock(box.mutex);
    const bool woken = box.wakeup.wait_until(lock, until, [&] { return box.activity.load() || group_->aborted(); });
    box.activity.store(false, std::memory_order_relaxed);
    return woken;
  }

  void cancel(request& r) noexcept {
    if (r.slot == UINT32_MAX) return;
    pending_op& op = *slots_[r.slot];
    if (op.type == op_type::send) withdraw_send(op);
    release(r);
  }

  void abort() { group_->abort(); }

 private:
  enum class op_type { send, recv, recv_reduce };
  struct pending_op {
    op_type type = op_type::send;
    int peer = -1;
    message_tag tag{};
    std::span<std::byte> into{};
    chunk_sink sink{};
    std::size_t bytes = 0;
    inproc_group::send_state state;  // for sends: what the receiver reports
  };

  void check_peer(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw error(errc::invalid_peer, "rank " + std::to_string(rank_) + ": peer " + std::to_string(peer) +
                                          " is not another rank of a group of " + std::to_string(size()));
  }

  std::pair<std::uint32_t, pending_op&> take_slot() {
    if (free_.empty()) {
      slots_.push_back(std::make_unique<pending_op>());
      free_.push_back(static_cast<std::uint32_t>(slots_.size() - 1));
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return {slot, *slots_[slot]};
  }

  void release(request& r) {
    free_.push_back(r.slot);
    r.slot = UINT32_MAX;
  }

  bool test_send(pending_op& op) {
    const auto status = op.state.status.load(std::memory_order_acquire);
    if (status == inproc_group::send_status::refused)
      throw error(errc::buffer_size_mismatch, "rank " + std::to_string(rank_) + ": rank " + std::to_string(op.peer) +
                                                  " expected " + std::to_string(op.state.expected_bytes) +
                                                  " bytes of this message; do all ranks pass the same counts?");
    if (status == inproc_group::send_status::failed)
      throw error(errc::aborted, "rank " + std::to_string(rank_) + ": rank " + std::to_string(op.peer) +
                                     " failed while receiving this rank's message");
    return status == inproc_group::send_status::delivered;
  }

  // Takes the matching send out of this rank's mailbox, if it has arrived, and moves
  // its bytes; the sender's buffer is read here, on the receiver's thread.
  bool test_receive(pending_op& op) {
    auto& box = *group_->mailboxes_[rank_];
    inproc_group::posted_send message;
    {
      std::lock_guard lock(box.mutex);
      auto it = std::find_if(box.arrived.begin(), box.arrived.end(),
                             [&](const auto& m) { return m.source == op.peer && m.tag == op.tag; });
      if (it == box.arrived.end()) return false;
      message = *it;
      box.arrived.erase(it);
    }
    if (message.data.size() != op.bytes) {
      message.state->expected_bytes = op.bytes;
      settle(message, inproc_group::send_status::refused);
      throw error(message.data.size() > op.bytes ? errc::message_truncated : errc::buffer_size_mismatch,
                  "rank " + std::to_string(rank_) + ": rank " + std::to_string(op.peer) + " sent " +
                      std::to_string(message.data.size()) + " bytes where " + std::to_string(op.bytes) +
                      " were expected; do all ranks pass the same counts?");
    }
    try {
      if (op.type == op_type::recv) {
        if (!message.data.empty()) std::memcpy(op.into.data(), message.data.data(), message.data.size());
      } else {
        op.sink(0, message.data);  // runs the user's op, which may throw
      }
    } catch (...) {
      settle(message, inproc_group::send_status::failed);
      throw;
    }
    settle(message, inproc_group::send_status::delivered);
    return true;
  }

  void settle(const inproc_group::posted_send& message, inproc_group::send_status status) {
    message.state->status.store(status, std::memory_order_release);
    group_->mailboxes_[message.source]->wake();
  }

  // Removes a send its receiver has not taken yet; if the receiver is reading it right
  // now, waits for that read to finish so the buffer can be reused.
  void withdraw_send(pending_op& op) noexcept {
    auto& box = *group_->mailboxes_[op.peer];
    {
      std::lock_guard lock(box.mutex);
      auto it = std::find_if(box.arrived.begin(), box.arrived.end(),
                             [&](const auto& m) { return m.state == &op.state; });
      if (it != box.arrived.end()) {
        box.arrived.erase(it);
        return;
      }
    }
    while (op.state.status.load(std::memory_order_acquire) == inproc_group::send_status::pending)
      std::this_thread::yield();
  }

  inproc_group* group_;
  int rank_;
  std::vector<std::unique_ptr<pending_op>> slots_;
  std::vector<std::uint32_t> free_;
};

inline inproc inproc_group::transport(int rank) { return inproc(*this, rank); }

// Runs fn(communicator<inproc>&) on `size` threads, one per rank, and waits for all.
// If a rank throws, the group is aborted so the others stop waiting, and the first
// rank's own error (not the "aborted" that followed it) is rethrown.
template <class Fn>
void run_ranks(int size, Fn&& fn, std::chrono::milliseconds timeout = default_timeout) {
  inproc_group group(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          communicator<inproc> comm(group.transport(r), timeout);
          fn(comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          group.abort();
        }
      });
  }
  auto is_echo = [](const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const error& x) {
      return x.code() == errc::aborted;
    } catch (...) {
      return false;
    }
  };
  std::exception_ptr first;
  for (auto& e : errors)
    if (e && !is_echo(e)) { first = e; break; }
  for (auto& e : errors)
    if (!first && e) first = e;
  if (first) std::rethrow_exception(first);
}

}  // namespace collectives
