// The shm transport's moving parts: posted operations, the FIFOs they move through,
// and the matching of arriving messages to posted receives.
//
// A message travels as fragments of at most one slot each. A sender copies as many
// as there are free slots whenever it is posted or tested, so a large message is
// pipelined through the FIFO while its receiver drains it. A receiver matches a
// message by its first fragment's tag: it lands in the posted receive (copied, or
// reduced straight out of the slot with a fused receive, so a reduction touches the
// message once), or, if small and not yet asked for, in an early-message buffer; a
// large one waits in the FIFO until its receive is posted, so nothing a peer sends
// sizes an allocation beyond the early limits.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../detail/matching.hpp"
#include "segment.hpp"
#include "waiting.hpp"

namespace collectives::shm_detail {

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::no_slot;
using transport_detail::op_state;
using transport_detail::op_type;

struct engine_limits {
  transport_detail::early_limits early{};        // messages kept before their receive is posted
  std::chrono::microseconds poll_time{50};       // poll this long before sleeping,
  std::chrono::microseconds oversubscribed_poll_time{2000};  // or this long, when ranks outnumber the cores
  unsigned spin_turns = 64;                      // turns before an unbound rank yields
  std::chrono::milliseconds watch_interval{5};   // how often a waiting rank checks its peers live
};

class engine {
 public:
  engine(int rank, segment seg, engine_limits limits)
      : seg_(std::move(seg)), match_(rank, seg_ ? seg_.shape().size : 1, limits.early), limits_(limits),
        bound_to_one_cpu_(shm_detail::bound_to_one_cpu()),
        poll_time_(!bound_to_one_cpu_ && size() > usable_cpus() ? limits.oversubscribed_poll_time : limits.poll_time),
        fifos_(std::size_t(size())) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Says goodbye: peers still expecting something from this rank fail instead of waiting.
  ~engine() {
    if (!seg_) return;
    shared(seg_.rank(rank()).state).store(departed, std::memory_order_release);
    for (int p = 0; p < size(); ++p)
      if (p != rank()) ring(seg_.bell(p));
  }

  int rank() const { return match_.rank(); }
  int size() const { return match_.size(); }
  const segment& shared_segment() const { return seg_; }
  process_watch& watch() { return watch_; }

  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    const std::uint32_t slot = match_.post_send(peer, tag, data);
    fifos_[std::size_t(peer)].sends.push_back(slot);
    push(peer);
    return slot;
  }

  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    return pulled(match_.post_recv(peer, tag, into));
  }

  std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return pulled(match_.post_recv_reduce(peer, tag, bytes, granule, sink));
  }

  bool test(std::uint32_t& slot) {
    op& o = match_.at(slot);
    if (o.state == op_state::posted || o.state == op_state::moving) {
      throw_if_broken();
      if (o.type == op_type::send) push(o.peer);
      else pull(o.peer);
      if (o.state == op_state::posted || o.state == op_state::moving) look_at_peer(o);
    }
    return match_.finish(slot);
  }

  // Polls briefly (a peer's answer often comes sooner than a sleeper is woken), then
  // sleeps on the doorbell, waking now and then to see that the peers live. While
  // polling, a rank bound to a core of its own keeps it (a yield could hand it to
  // another process for a whole time slice); any other rank yields after a few turns,
  // since the peer it waits for may be waiting for this very core.
  bool wait_for_activity(deadline until) {
    if (broken()) return true;
    if (!seg_) {  // alone: nothing can arrive, only an abort from another thread
      while (clock::now() < until && !broken()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return broken();
    }
    const auto poll_until = std::min(until, clock::now() + poll_time_);
    for (unsigned turn = 0;; ++turn) {
      if (news()) return true;
      if (bound_to_one_cpu_ || turn < limits_.spin_turns) cpu_relax();
      else std::this_thread::yield();
      if (turn % 8 == 7 && clock::now() >= poll_until) break;
    }
    for (;;) {
      const auto now = clock::now();
      if (now >= next_watch_) {
        next_watch_ = now + limits_.watch_interval;
        if (notice_dead_peer()) return true;
      }
      if (now >= until) return false;
      const auto limit = std::min(until, next_watch_) - now;
      if (sleep_on(seg_.bell(rank()), limit, [&] { return news() || broken(); })) return true;
    }
  }

  void cancel(std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    const std::uint32_t cancelled = slot;
    const cancellation c = match_.cancel(slot);
    if (c.type == op_type::send) {
      if (c.state == op_state::moving) {
        // Halfway through: the receiver can't resynchronise, so the FIFO is given up.
        shared(seg_.control(rank(), c.peer).abandoned).store(1, std::memory_order_release);
        ring(seg_.bell(c.peer));
        match_.break_link(c.peer, "this rank gave up on a message to rank " + std::to_string(c.peer) + " halfway through");
      }
      std::erase(fifos_[std::size_t(c.peer)].sends, cancelled);
    } else if (c.mid_message) {
      match_.break_link(c.peer, "this rank gave up on a message from rank " + std::to_string(c.peer) + " halfway through");
    }
  }

  // Thread-safe: marks the group aborted and wakes every rank.
  void abort() {
    if (!seg_) {
      match_.note_abort(rank());
      return;
    }
    std::int32_t none = -1;
    shared(seg_.header().aborted_by).compare_exchange_strong(none, rank());
    for (int p = 0; p < size(); ++p) ring(seg_.bell(p));
  }

  void throw_if_broken() {
    note_abort();
    match_.throw_if_broken();
  }

 private:
  using op = transport_detail::operation<>;

  // This rank's ends of the two FIFOs it shares with a peer.
  struct fifo_ends {
    // Sending: operations in the order posted; the FIFO's next sequence number.
    std::deque<std::uint32_t> sends;
    std::uint64_t head = 0, known_tail = 0;
    // Receiving: the next sequence number expected.
    std::uint64_t tail = 0;
    // What the last wait saw, so that only changes count as news.
    std::uint64_t seen_in = 0, seen_out = 0;
    std::uint32_t seen_state = attached;
  };

  // An abort by any rank is a word in the segment; the matching engine learns of it here.
  void note_abort() {
    if (seg_)
      if (const int by = shared(seg_.header().aborted_by).load(std::memory_order_relaxed); by >= 0) match_.note_abort(by);
  }
  bool broken() {
    note_abort();
    return match_.broken();
  }

  std::uint32_t pulled(std::uint32_t slot) {
    const op& o = match_.at(slot);
    if (o.state == op_state::posted) pull(o.peer);
    return slot;
  }

  // Copies as many fragments of the peer's queued sends into its FIFO as fit.
  void push(int peer) {
    fifo_ends& link = fifos_[std::size_t(peer)];
    if (match_.link(peer) == link_state::broken) return;
    const std::size_t capacity = seg_.shape().slot_bytes, slots = seg_.shape().slots;
    bool pushed = false;
    while (!link.sends.empty()) {
      op& o = match_.at(link.sends.front());
      if (link.head - link.known_tail == slots) {
        link.known_tail = shared(seg_.control(rank(), peer).tail).load(std::memory_order_acquire);
        if (link.head - link.known_tail == slots) break;
      }
      slot_header& s = seg_.slot(rank(), peer, link.head % slots);
      const std::size_t n = std::min(capacity, o.bytes - o.moved);
      s.call = o.tag.call;
      s.step = o.tag.step;
      s.fragment_bytes = std::uint32_t(n);
      s.message_bytes = o.bytes;
      s.offset = o.moved;
      if (n != 0) std::memcpy(reinterpret_cast<std::byte*>(&s + 1), o.out.data() + o.moved, n);
      shared(s.sequence).store(++link.head, std::memory_order_release);
      o.moved += n;
      o.state = op_state::moving;
      pushed = true;
      if (o.moved == o.bytes) {
        o.state = op_state::done;
        link.sends.pop_front();
      }
    }
    if (pushed) ring_if_sleeping(seg_.bell(peer));
  }

  // Hands the peer's arrived fragments to the matching engine, as far as it takes
  // them: a message it holds back (large, its receive not posted) stays in the FIFO.
  void pull(int peer) {
    fifo_ends& link = fifos_[std::size_t(peer)];
    if (match_.link(peer) == link_state::broken) return;
    const std::size_t slots = seg_.shape().slots;
    bool pulled = false;
    for (;;) {
      slot_header& s = seg_.slot(peer, rank(), link.tail % slots);
      if (shared(s.sequence).load(std::memory_order_acquire) != link.tail + 1) break;
      if (!well_formed(s, peer)) break;
      if (!match_.in_message(peer) && match_.begin_message(peer, {s.call, s.step}, s.message_bytes) == landing::held) break;
      if (s.fragment_bytes != 0) match_.deliver(peer, {reinterpret_cast<const std::byte*>(&s + 1), s.fragment_bytes});
      shared(seg_.control(peer, rank()).tail).store(++link.tail, std::memory_order_release);
      pulled = true;
    }
    if (pulled) ring_if_sleeping(seg_.bell(peer));
  }

  // A fragment must continue the message in progress, or start one at offset 0.
  bool well_formed(const slot_header& s, int peer) {
    const bool starts = !match_.in_message(peer);
    const bool ok = s.fragment_bytes <= seg_.shape().slot_bytes && s.offset <= s.message_bytes &&
                    s.fragment_bytes <= s.message_bytes - s.offset &&
                    (starts ? s.offset == 0 && (s.fragment_bytes > 0 || s.message_bytes == 0)
                            : s.offset == match_.message_moved(peer) && s.message_bytes == match_.message_bytes(peer) &&
                                  message_tag{s.call, s.step} == match_.message_tag_of(peer) && s.fragment_bytes > 0);
    if (!ok) match_.break_link(peer, "rank " + std::to_string(peer) + " sent a malformed fragment; build a new communicator");
    return ok;
  }

  // An operation whose peer gave up or left: what it sent before still counts.
  void look_at_peer(op& o) {
    if (o.type != op_type::send && shared(seg_.control(o.peer, rank()).abandoned).load(std::memory_order_acquire) != 0) {
      pull(o.peer);
      notice_dead_peer();  // a peer gives up after a loss of its own: name that loss first
      throw_if_broken();
      if (o.state != op_state::done)
        match_.fail(o, errc::protocol_error, "rank " + std::to_string(o.peer) +
                                                 " gave up halfway through a message to this rank after a failure of its own");
    }
    if (shared(seg_.rank(o.peer).state).load(std::memory_order_acquire) == departed) {
      if (o.type != op_type::send) pull(o.peer);  // its last messages are still in the FIFO
      match_.depart(o.peer, "rank " + std::to_string(o.peer) + " closed its communicator");
    }
  }

  // True when anything changed since the last look: a fragment arrived, slots were
  // freed, a peer left or gave up, the group was aborted.
  bool news() {
    if (broken()) return true;
    bool changed = false;
    const std::size_t slots = seg_.shape().slots;
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      fifo_ends& link = fifos_[std::size_t(p)];
      const slot_header& next = seg_.slot(p, rank(), link.tail % slots);
      const std::uint64_t in = link.tail + (shared(next.sequence).load(std::memory_order_acquire) == link.tail + 1 ? 1 : 0) +
                               shared(seg_.control(p, rank()).abandoned).load(std::memory_order_relaxed);
      const std::uint64_t out = shared(seg_.control(rank(), p).tail).load(std::memory_order_acquire);
      const std::uint32_t state = shared(seg_.rank(p).state).load(std::memory_order_acquire);
      if (in != link.seen_in || out != link.seen_out || state != link.seen_state) changed = true;
      link.seen_in = in;
      link.seen_out = out;
      link.seen_state = state;
    }
    return changed;
  }

  bool notice_dead_peer() {
    if (match_.first_lost() >= 0) return true;
    const int dead = watch_.first_dead([&](int p) { return shared(seg_.rank(p).state).load(std::memory_order_acquire) == departed; });
    if (dead < 0) return false;
    match_.lose(dead, "lost rank " + std::to_string(dead) + ": its process (pid " + std::to_string(watch_.pid_of(dead)) + ") died");
    return true;
  }

  segment seg_;
  transport_detail::matching_engine<> match_;
  engine_limits limits_;
  // Ranks that outnumber the cores poll (yielding) longer: a peer that is about to
  // answer then gets the core at once, where a futex sleep and wake-up would cost a
  // round trip through the scheduler for every message. A rank bound to a core
  // (collectives-run --bind-to core, mpirun --bind-to core) is taken to have it alone.
  bool bound_to_one_cpu_;
  std::chrono::microseconds poll_time_;
  std::vector<fifo_ends> fifos_;
  process_watch watch_;
  deadline next_watch_{};
};

}  // namespace collectives::shm_detail
