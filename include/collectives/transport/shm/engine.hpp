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
#include "segment.hpp"
#include "waiting.hpp"

namespace collectives::shm_detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

struct engine_limits {
  std::size_t early_message_bytes = 64 * 1024;   // largest message kept before its receive is posted
  std::size_t early_bytes_per_peer = 4u << 20;   // most early bytes kept from one peer
  std::chrono::microseconds poll_time{50};       // poll this long before sleeping,
  std::chrono::microseconds oversubscribed_poll_time{2000};  // or this long, when ranks outnumber the cores
  unsigned spin_turns = 64;                      // turns before an unbound rank yields
  std::chrono::milliseconds watch_interval{5};   // how often a waiting rank checks its peers live
};

class engine {
 public:
  engine(int rank, segment seg, engine_limits limits)
      : rank_(rank), size_(seg ? seg.shape().size : 1), seg_(std::move(seg)), limits_(limits),
        bound_to_one_cpu_(shm_detail::bound_to_one_cpu()),
        poll_time_(!bound_to_one_cpu_ && size_ > usable_cpus() ? limits.oversubscribed_poll_time : limits.poll_time),
        peers_(std::size_t(size_)) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Says goodbye: peers still expecting something from this rank fail instead of waiting.
  ~engine() {
    if (!seg_) return;
    shared(seg_.rank(rank_).state).store(departed, std::memory_order_release);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) ring(seg_.bell(p));
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const segment& shared_segment() const { return seg_; }
  process_watch& watch() { return watch_; }

  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    peer_link& link = link_to(peer);
    auto [slot, o] = take_slot(op_type::send, peer, tag, data.size());
    o.out = data;
    link.sends.push_back(slot);
    push(peer);
    return slot;
  }

  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    link_to(peer);
    auto [slot, o] = take_slot(op_type::recv, peer, tag, into.size());
    o.in = into;
    return accept_receive(slot);
  }

  std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    link_to(peer);
    auto [slot, o] = take_slot(op_type::recv_reduce, peer, tag, bytes);
    o.sink = sink;
    o.granule = std::max<std::size_t>(granule, 1);
    return accept_receive(slot);
  }

  bool test(std::uint32_t& slot) {
    pending_op& o = *ops_[slot];
    if (o.state == op_state::posted || o.state == op_state::moving) {
      throw_if_broken();
      if (o.type == op_type::send) push(o.peer);
      else pull(o.peer);
      if (o.state == op_state::posted && o.type != op_type::send) take_early(slot);
    }
    if (o.state == op_state::done) {
      release(slot);
      return true;
    }
    if (o.state == op_state::failed) std::rethrow_exception(o.failure);
    throw_if_stuck(o);
    return false;
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
      if (sleep_on(seg_.bell(rank_), limit, [&] { return news() || broken(); })) return true;
    }
  }

  void cancel(std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    pending_op& o = *ops_[slot];
    peer_link& link = peers_[std::size_t(o.peer)];
    if (o.type == op_type::send) {
      if (o.state == op_state::moving) {
        // Halfway through: the receiver can't resynchronise, so the FIFO is given up.
        shared(seg_.control(rank_, o.peer).abandoned).store(1, std::memory_order_release);
        ring(seg_.bell(o.peer));
        link.broken = "this rank gave up on a message to rank " + std::to_string(o.peer) + " halfway through";
      }
      std::erase(link.sends, slot);
    } else {
      if (link.receiving == slot) {
        link.receiving = no_slot;
        link.broken = "this rank gave up on a message from rank " + std::to_string(o.peer) + " halfway through";
      }
      std::erase(link.posted, slot);
    }
    release(slot);
  }

  // Thread-safe: marks the group aborted and wakes every rank.
  void abort() {
    if (!seg_) {
      local_abort_.store(true);
      return;
    }
    std::int32_t none = -1;
    shared(seg_.header().aborted_by).compare_exchange_strong(none, rank_);
    for (int p = 0; p < size_; ++p) ring(seg_.bell(p));
  }

  void throw_if_broken() const {
    if (const int by = aborted_by(); by >= 0)
      throw error(errc::aborted, who() + "the group was aborted by " + (by == rank_ ? "this rank" : "rank " + std::to_string(by)));
    if (dead_peer_ >= 0)
      throw error(errc::peer_lost, who() + "lost rank " + std::to_string(dead_peer_) + ": its process (pid " +
                                       std::to_string(watch_.pid_of(dead_peer_)) + ") died");
  }

 private:
  enum class op_type : std::uint8_t { send, recv, recv_reduce };
  enum class op_state : std::uint8_t { posted, moving, done, failed };

  struct pending_op {
    op_type type = op_type::send;
    op_state state = op_state::posted;
    int peer = -1;
    message_tag tag{};
    std::size_t bytes = 0, moved = 0;
    std::span<const std::byte> out{};
    std::span<std::byte> in{};
    chunk_sink sink{};
    std::size_t granule = 1;
    std::vector<std::byte> carry;  // a fused receive's element split between two fragments
    std::exception_ptr failure;
  };

  struct early_message {
    message_tag tag{};
    std::vector<std::byte> bytes;
    std::size_t arrived = 0;
    bool complete() const { return arrived == bytes.size(); }
  };

  // Where the fragments of the message now arriving from a peer go.
  enum class landing : std::uint8_t { none, receive, early, discard };

  struct peer_link {
    // Sending: operations in the order posted; the FIFO's next sequence number.
    std::deque<std::uint32_t> sends;
    std::uint64_t head = 0, known_tail = 0;
    // Receiving.
    std::vector<std::uint32_t> posted;  // receives not yet matched
    std::uint64_t tail = 0;
    landing into = landing::none;
    std::uint32_t receiving = no_slot;
    std::size_t early_index = 0, message_bytes = 0, message_moved = 0;
    message_tag message{};
    std::deque<early_message> early;
    std::size_t early_bytes = 0;
    std::string broken;  // why this link can't be used any more
    // What the last wait saw, so that only changes count as news.
    std::uint64_t seen_in = 0, seen_out = 0;
    std::uint32_t seen_state = attached;
  };

  std::string who() const { return "rank " + std::to_string(rank_) + ": "; }
  int aborted_by() const {
    if (!seg_) return local_abort_.load() ? rank_ : -1;
    return shared(seg_.header().aborted_by).load(std::memory_order_relaxed);
  }
  bool broken() const { return aborted_by() >= 0 || dead_peer_ >= 0; }

  peer_link& link_to(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw error(errc::invalid_peer, who() + "peer " + std::to_string(peer) + " is not another rank of a group of " +
                                          std::to_string(size_));
    return peers_[std::size_t(peer)];
  }

  std::pair<std::uint32_t, pending_op&> take_slot(op_type type, int peer, message_tag tag, std::size_t bytes) {
    if (free_.empty()) {
      ops_.push_back(std::make_unique<pending_op>());
      free_.push_back(static_cast<std::uint32_t>(ops_.size() - 1));
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    pending_op& o = *ops_[slot];
    o.type = type;
    o.state = op_state::posted;
    o.peer = peer;
    o.tag = tag;
    o.bytes = bytes;
    o.moved = 0;
    o.carry.clear();
    o.failure = nullptr;
    return {slot, o};
  }

  void release(std::uint32_t& slot) {
    free_.push_back(slot);
    slot = no_slot;
  }

  void fail(pending_op& o, errc code, const std::string& why) {
    o.state = op_state::failed;
    o.failure = std::make_exception_ptr(error(code, who() + why));
  }

  // A message whose size isn't what its receive expects fails that receive only.
  void fail_size(pending_op& o, std::size_t sent) {
    fail(o, sent > o.bytes ? errc::message_truncated : errc::buffer_size_mismatch,
         "rank " + std::to_string(o.peer) + " sent " + std::to_string(sent) + " bytes where " + std::to_string(o.bytes) +
             " were expected; do all ranks pass the same counts?");
  }

  std::uint32_t accept_receive(std::uint32_t slot) {
    pending_op& o = *ops_[slot];
    peer_link& link = peers_[std::size_t(o.peer)];
    link.posted.push_back(slot);
    if (!take_early(slot)) pull(o.peer);
    return slot;
  }

  // Copies as many fragments of the peer's queued sends into its FIFO as fit.
  void push(int peer) {
    peer_link& link = peers_[std::size_t(peer)];
    if (!link.broken.empty()) return;
    const std::size_t capacity = seg_.shape().slot_bytes, slots = seg_.shape().slots;
    bool pushed = false;
    while (!link.sends.empty()) {
      pending_op& o = *ops_[link.sends.front()];
      if (link.head - link.known_tail == slots) {
        link.known_tail = shared(seg_.control(rank_, peer).tail).load(std::memory_order_acquire);
        if (link.head - link.known_tail == slots) break;
      }
      slot_header& s = seg_.slot(rank_, peer, link.head % slots);
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

  // Takes the peer's arrived fragments to where they belong, as far as possible.
  void pull(int peer) {
    peer_link& link = peers_[std::size_t(peer)];
    if (!link.broken.empty()) return;
    const std::size_t slots = seg_.shape().slots;
    bool pulled = false;
    for (;;) {
      slot_header& s = seg_.slot(peer, rank_, link.tail % slots);
      if (shared(s.sequence).load(std::memory_order_acquire) != link.tail + 1) break;
      if (!well_formed(link, s, peer)) break;
      if (link.into == landing::none && !choose_landing(link, s)) break;
      land(link, s);
      shared(seg_.control(peer, rank_).tail).store(++link.tail, std::memory_order_release);
      pulled = true;
    }
    if (pulled) ring_if_sleeping(seg_.bell(peer));
  }

  // A fragment must continue the message in progress, or start one at offset 0.
  bool well_formed(peer_link& link, const slot_header& s, int peer) {
    const bool starts = link.into == landing::none;
    const bool ok = s.fragment_bytes <= seg_.shape().slot_bytes && s.offset <= s.message_bytes &&
                    s.fragment_bytes <= s.message_bytes - s.offset &&
                    (starts ? s.offset == 0 && (s.fragment_bytes > 0 || s.message_bytes == 0)
                            : s.offset == link.message_moved && s.message_bytes == link.message_bytes &&
                                  s.call == link.message.call && s.step == link.message.step && s.fragment_bytes > 0);
    if (!ok) link.broken = "rank " + std::to_string(peer) + " sent a malformed fragment; build a new communicator";
    return ok;
  }

  bool choose_landing(peer_link& link, const slot_header& s) {
    const message_tag tag{s.call, s.step};
    link.message = tag;
    link.message_bytes = s.message_bytes;
    link.message_moved = 0;
    const auto match = std::find_if(link.posted.begin(), link.posted.end(), [&](std::uint32_t r) { return ops_[r]->tag == tag; });
    if (match != link.posted.end()) {
      const std::uint32_t slot = *match;
      link.posted.erase(match);
      pending_op& o = *ops_[slot];
      if (o.bytes != s.message_bytes) {
        fail_size(o, s.message_bytes);
        link.into = landing::discard;
      } else {
        o.state = op_state::moving;
        link.receiving = slot;
        link.into = landing::receive;
      }
      return true;
    }
    if (s.message_bytes > limits_.early_message_bytes || link.early_bytes + s.message_bytes > limits_.early_bytes_per_peer)
      return false;  // stays in the FIFO until its receive is posted
    link.early.push_back({tag, std::vector<std::byte>(s.message_bytes), 0});
    link.early_bytes += s.message_bytes;
    link.early_index = link.early.size() - 1;
    link.into = landing::early;
    return true;
  }

  void land(peer_link& link, const slot_header& s) {
    const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(&s + 1), s.fragment_bytes);
    if (link.into == landing::receive) {
      pending_op& o = *ops_[link.receiving];
      deliver(o, s.offset, piece);
      if (o.state == op_state::failed) link.into = landing::discard;
    } else if (link.into == landing::early) {
      early_message& m = link.early[link.early_index];
      if (!piece.empty()) std::memcpy(m.bytes.data() + s.offset, piece.data(), piece.size());
      m.arrived += piece.size();
    }
    link.message_moved += piece.size();
    if (link.message_moved == link.message_bytes) {
      if (link.into == landing::receive) ops_[link.receiving]->state = op_state::done;
      link.into = landing::none;
      link.receiving = no_slot;
    }
  }

  // Into the receive's buffer, or through its sink in whole elements.
  void deliver(pending_op& o, std::size_t offset, std::span<const std::byte> piece) {
    try {
      if (o.type == op_type::recv) {
        if (!piece.empty()) std::memcpy(o.in.data() + offset, piece.data(), piece.size());
      } else {
        feed_sink(o, offset, piece);
      }
      o.moved += piece.size();
    } catch (...) {  // the user's op threw
      o.state = op_state::failed;
      o.failure = std::current_exception();
    }
  }

  static void feed_sink(pending_op& o, std::size_t offset, std::span<const std::byte> piece) {
    const std::size_t g = o.granule;
    if (!o.carry.empty()) {  // complete the element the last fragment split
      const std::size_t need = std::min(g - o.carry.size(), piece.size());
      o.carry.insert(o.carry.end(), piece.begin(), piece.begin() + std::ptrdiff_t(need));
      piece = piece.subspan(need);
      offset += need;
      if (o.carry.size() < g) return;
      o.sink(offset - g, o.carry);
      o.carry.clear();
    }
    const std::size_t whole = piece.size() / g * g;
    if (whole != 0) o.sink(offset, piece.first(whole));
    o.carry.assign(piece.begin() + std::ptrdiff_t(whole), piece.end());
  }

  // A receive whose message already arrived early: finishes it now.
  bool take_early(std::uint32_t slot) {
    pending_op& o = *ops_[slot];
    peer_link& link = peers_[std::size_t(o.peer)];
    for (std::size_t i = 0; i < link.early.size(); ++i) {
      early_message& m = link.early[i];
      if (!(m.tag == o.tag) || !m.complete()) continue;
      std::erase(link.posted, slot);
      if (m.bytes.size() != o.bytes) {
        fail_size(o, m.bytes.size());
      } else {
        deliver(o, 0, m.bytes);
        if (o.state != op_state::failed) o.state = op_state::done;
      }
      link.early_bytes -= m.bytes.size();
      link.early.erase(link.early.begin() + std::ptrdiff_t(i));
      if (link.into == landing::early && link.early_index > i) --link.early_index;
      return true;
    }
    return false;
  }

  // An operation that can't finish because its peer is gone or its FIFO broken.
  void throw_if_stuck(const pending_op& o) {
    const peer_link& link = peers_[std::size_t(o.peer)];
    if (!link.broken.empty()) throw error(errc::protocol_error, who() + link.broken);
    if (o.type != op_type::send && shared(seg_.control(o.peer, rank_).abandoned).load(std::memory_order_acquire) != 0) {
      pull(o.peer);  // what it sent before giving up still counts
      notice_dead_peer();  // a peer gives up after a loss of its own: name that loss first
      throw_if_broken();
      if (o.state != op_state::done)
        throw error(errc::protocol_error, who() + "rank " + std::to_string(o.peer) +
                                              " gave up halfway through a message to this rank after a failure of its own");
    }
    if (shared(seg_.rank(o.peer).state).load(std::memory_order_acquire) == departed) {
      if (o.type != op_type::send) pull(o.peer);  // its last messages are still in the FIFO
      if (o.state != op_state::done)
        throw error(errc::peer_lost, who() + "rank " + std::to_string(o.peer) + " closed its communicator while this rank still had a message " +
                                         (o.type == op_type::send ? "for" : "from") + " it");
    }
  }

  // True when anything changed since the last look: a fragment arrived, slots were
  // freed, a peer left or gave up, the group was aborted.
  bool news() {
    if (broken()) return true;
    bool changed = false;
    const std::size_t slots = seg_.shape().slots;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      peer_link& link = peers_[std::size_t(p)];
      const slot_header& next = seg_.slot(p, rank_, link.tail % slots);
      const std::uint64_t in = link.tail + (shared(next.sequence).load(std::memory_order_acquire) == link.tail + 1 ? 1 : 0) +
                               shared(seg_.control(p, rank_).abandoned).load(std::memory_order_relaxed);
      const std::uint64_t out = shared(seg_.control(rank_, p).tail).load(std::memory_order_acquire);
      const std::uint32_t state = shared(seg_.rank(p).state).load(std::memory_order_acquire);
      if (in != link.seen_in || out != link.seen_out || state != link.seen_state) changed = true;
      link.seen_in = in;
      link.seen_out = out;
      link.seen_state = state;
    }
    return changed;
  }

  bool notice_dead_peer() {
    if (dead_peer_ < 0)
      dead_peer_ = watch_.first_dead([&](int p) { return shared(seg_.rank(p).state).load(std::memory_order_acquire) == departed; });
    return dead_peer_ >= 0;
  }

  int rank_, size_;
  segment seg_;
  engine_limits limits_;
  // Ranks that outnumber the cores poll (yielding) longer: a peer that is about to
  // answer then gets the core at once, where a futex sleep and wake-up would cost a
  // round trip through the scheduler for every message. A rank bound to a core
  // (collectives-run --bind-to core, mpirun --bind-to core) is taken to have it alone.
  bool bound_to_one_cpu_;
  std::chrono::microseconds poll_time_;
  std::vector<peer_link> peers_;
  std::vector<std::unique_ptr<pending_op>> ops_;
  std::vector<std::uint32_t> free_;
  process_watch watch_;
  int dead_peer_ = -1;
  std::atomic<bool> local_abort_{false};
  deadline next_watch_{};
};

}  // namespace collectives::shm_detail
