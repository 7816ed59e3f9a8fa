// In-process transport: the ranks are threads of one process and a message is read
// straight out of the sender's buffer by the receiver (one copy, or none when the
// receiver reduces it on the spot). The reference transport for tests, and useful to
// engines that drive one device per thread. run_ranks.hpp starts such a group.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "detail/matching.hpp"
#include "detail/wire_transport.hpp"

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

  // Wakes every rank's pending operations with errc::aborted. `by`: the rank that
  // aborted, if a rank did.
  void abort(int by = transport_detail::matching_engine<>::from_outside) {
    int none = -1;
    aborted_by_.compare_exchange_strong(none, by);
    for (auto& box : mailboxes_) box->wake();
  }
  bool aborted() const { return aborted_by_.load(std::memory_order_relaxed) != -1; }
  int aborted_by() const { return aborted_by_.load(std::memory_order_relaxed); }

 private:
  friend class inproc;

  // What a posted send leaves for its receiver; the sender watches `status`.
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
    std::atomic<std::uint64_t> arrivals{0};  // sends ever left here: bumped under `mutex`

    void wake() {
      { std::lock_guard lock(mutex); activity.store(true, std::memory_order_release); }
      wakeup.notify_one();
    }
  };

  std::vector<std::unique_ptr<mailbox>> mailboxes_;
  std::atomic<int> aborted_by_{-1};
};

// The wire: a posted send leaves a note in its receiver's mailbox and the receiver
// reads the sender's buffer when it matches the note, so a message waits in the
// sender's memory until its receive is posted (the matching engine keeps no early
// copies for this transport) and a send completes once its receiver has taken it.
class inproc {
 public:
  // Posting a message costs a lock and a wake-up; moving it costs one memcpy.
  static constexpr link_costs costs{.latency_s = 4e-6, .per_message_s = 1e-6,
                                    .seconds_per_byte = 1.0 / 8e9, .reduce_seconds_per_byte = 1.0 / 8e9};
  // A receiver reads a send out of the sender's buffer, so nothing is held in between;
  // threads cannot die or leave apart from the process.
  static constexpr transport_traits traits{.sends = send_completion::at_delivery,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = 0,
                                           .large_early_message_blocks_peer = false,
                                           .sender_sees_size_refusal = true,
                                           .cancel_halfway = cancel_mid_transfer::link_goes_on,
                                           .reports_departed_peer = false,
                                           .ranks_can_be_processes = false,
                                           .one_host = true};

  static constexpr std::chrono::microseconds poll_time{20};

  using request = transport_detail::slot_request;

  inproc(inproc_group& group, int rank)
      : group_(&group), rank_(rank),
        match_(std::make_unique<engine>(checked_rank(group, rank), group.size(), transport_detail::early_limits{0, 0})) {}
  inproc(inproc&&) noexcept = default;
  inproc& operator=(inproc&&) noexcept = default;

  int rank() const { return rank_; }
  int size() const { return group_->size(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    const std::uint32_t slot = match_->post_send(peer, tag, data);
    inproc_group::send_state& state = match_->at(slot).wire;
    state.status.store(inproc_group::send_status::pending, std::memory_order_relaxed);
    auto& box = *group_->mailboxes_[std::size_t(peer)];
    {
      std::lock_guard lock(box.mutex);
      box.arrived.push_back({rank_, tag, data, &state});
      box.arrivals.fetch_add(1, std::memory_order_release);
      box.activity.store(true, std::memory_order_release);
    }
    box.wakeup.notify_one();
    return {slot};
  }

  request post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    looked_at_arrivals_ = never_looked;  // a note held so far may land in this receive
    return {match_->post_recv(peer, tag, into)};
  }

  // Fused receive: the sink reads the bytes straight from the sender's buffer.
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    looked_at_arrivals_ = never_looked;
    return {match_->post_recv_reduce(peer, tag, bytes, granule, sink)};
  }

  bool test(request& r) {
    op& o = match_->at(r.slot);
    if (group_->aborted()) match_->note_abort(group_->aborted_by());
    match_->throw_if_broken();
    if (o.type == op_type::send) settle_send(o);
    else take_arrived(o);
    return match_->finish(r.slot);
  }

  // Polls briefly before sleeping: a peer's answer often comes within microseconds,
  // sooner than a sleeping thread is woken. The poll yields the core on every turn,
  // so ranks that outnumber the cores still make progress.
  bool wait_for_activity(deadline until) {
    auto& box = *group_->mailboxes_[std::size_t(rank_)];
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
    if (r.slot == transport_detail::no_slot) return;
    op& o = match_->at(r.slot);
    if (o.type == op_type::send) withdraw_send(o);
    match_->cancel(r.slot);
  }

  void abort() { group_->abort(rank_); }

 private:
  using engine = transport_detail::matching_engine<inproc_group::send_state>;
  using op = engine::op;
  using op_type = transport_detail::op_type;
  using op_state = transport_detail::op_state;
  using send_status = inproc_group::send_status;

  static int checked_rank(const inproc_group& group, int rank) {
    if (rank < 0 || rank >= group.size())
      throw error(errc::invalid_peer, "inproc: rank " + std::to_string(rank) + " is not in a group of " +
                                          std::to_string(group.size()));
    return rank;
  }

  // What the receiver made of this rank's send.
  void settle_send(op& o) {
    switch (o.wire.status.load(std::memory_order_acquire)) {
      case send_status::pending: return;
      case send_status::delivered: o.state = op_state::done; return;
      case send_status::refused: return match_->fail_refused(o, o.wire.expected_bytes);
      case send_status::failed:
        return match_->fail(o, errc::aborted, "rank " + std::to_string(o.peer) + " failed while receiving this rank's message");
    }
  }

  // Offers the notes left in this rank's mailbox to the matching engine, in the order
  // they came, and takes each one that lands (in a receive posted for it, or nowhere,
  // when its size is wrong); the others stay until a receive is posted for them. The
  // sender's buffer is read here, on the receiver's thread. A rank with many receives
  // posted (a ring's 2(P - 1)) tests each of them on every poll: while no note came
  // and no receive was posted since the last look, that test takes no lock.
  void take_arrived(const op& o) {
    auto& box = *group_->mailboxes_[std::size_t(rank_)];
    if (o.state != op_state::posted || box.arrivals.load(std::memory_order_acquire) == looked_at_arrivals_) return;
    for (;;) {
      inproc_group::posted_send message{};
      {
        std::lock_guard lock(box.mutex);
        auto it = box.arrived.begin();
        for (; it != box.arrived.end(); ++it)
          if (match_->begin_message(it->source, it->tag, it->data.size()) != transport_detail::landing::held) break;
        if (it == box.arrived.end()) {
          looked_at_arrivals_ = box.arrivals.load(std::memory_order_relaxed);
          return;
        }
        message = *it;
        box.arrived.erase(it);
      }
      take(message);
    }
  }

  void take(const inproc_group::posted_send& message) {
    const int peer = message.source;
    const std::uint32_t into = match_->receiving(peer);
    const std::size_t expected = match_->expected_bytes(peer);
    if (!message.data.empty()) match_->deliver(peer, message.data);  // runs the user's op for a fused receive
    if (into == transport_detail::no_slot && message.data.size() != expected) {
      message.state->expected_bytes = expected;
      settle(message, send_status::refused);
    } else {
      settle(message, into != transport_detail::no_slot && match_->at(into).state == op_state::failed ? send_status::failed
                                                                                                   : send_status::delivered);
    }
  }

  void settle(const inproc_group::posted_send& message, send_status status) {
    message.state->status.store(status, std::memory_order_release);
    group_->mailboxes_[std::size_t(message.source)]->wake();
  }

  // Removes a send its receiver has not taken yet; if the receiver is reading it right
  // now, waits for that read to finish so the buffer can be reused.
  void withdraw_send(op& o) noexcept {
    auto& box = *group_->mailboxes_[std::size_t(o.peer)];
    {
      std::lock_guard lock(box.mutex);
      auto it = std::find_if(box.arrived.begin(), box.arrived.end(), [&](const auto& m) { return m.state == &o.wire; });
      if (it != box.arrived.end()) {
        box.arrived.erase(it);
        return;
      }
    }
    while (o.wire.status.load(std::memory_order_acquire) == send_status::pending) std::this_thread::yield();
  }

  static constexpr std::uint64_t never_looked = UINT64_MAX;

  inproc_group* group_;
  int rank_;
  std::uint64_t looked_at_arrivals_ = never_looked;  // the mailbox's count at the last look that took nothing
  std::unique_ptr<engine> match_;  // behind a pointer: the transport moves, its operations stay put
};

inline inproc inproc_group::transport(int rank) { return inproc(*this, rank); }

}  // namespace collectives
