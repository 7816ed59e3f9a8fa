// What every transport shares beneath its wire: the pool of posted operations; each
// peer's posted receives and early messages, matched first-in first-out per (peer,
// tag); the budget for early data; size checks; delivery into a receive's buffer or
// through a fused receive's sink in whole elements; cancel; abort; and the state of
// each link (open, departed, lost, broken), and the first failure, with one set of
// error messages.
//
// A transport keeps only its wire: how bytes move and how it waits. The wire posts
// operations here, queues and moves the sends itself, and hands every message that
// arrives from a peer over in order: begin_message(), then deliver() of its bytes.
// The engine says where the message lands: in the receive that matched it, in an
// early buffer (small messages that came first), nowhere (its receive failed), or
// `held`: the wire keeps it (in its FIFO, socket or the sender's buffer) and offers
// it again once another receive is posted. So no size from a peer ever sizes an
// allocation beyond the early budget.
//
// The engine moves bytes through a policy, host memory's memcpy by default; device_ipc
// gives it its device's (asynchronous) copies and device memory for early messages.
//
// Everything here runs on the thread that owns the transport, except abort(), which
// any thread may call.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../../concepts/transport.hpp"
#include "../../error.hpp"

namespace collectives::transport_detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

enum class op_type : std::uint8_t { send, recv, recv_reduce };
enum class op_state : std::uint8_t { posted, moving, done, failed };

// The state a wire adds to each operation, if any.
struct no_wire_state {};

// How the engine moves the bytes of its messages and keeps early ones: here, host
// memory and memcpy, with early buffers reused, so that small messages that come
// first cost no allocation once the first few have been seen. A policy for other
// memory has the same members; its copies may be asynchronous, as long as they run
// in the order made (the wire then waits for them before it completes a receive).
class host_bytes {
 public:
  using buffer = std::vector<std::byte>;
  static std::byte* data(buffer& b) { return b.data(); }
  static void copy(std::byte* to, const std::byte* from, std::size_t n) {
    if (n != 0) std::memcpy(to, from, n);
  }
  // A buffer of `bytes` for an early message.
  buffer take(std::size_t bytes) {
    buffer b;
    if (!spare_.empty()) {
      b = std::move(spare_.back());
      spare_.pop_back();
    }
    b.resize(bytes);
    return b;
  }
  // The engine is done with it (a copy out of it may still be under way).
  void give_back(buffer&& b) { spare_.push_back(std::move(b)); }

 private:
  std::vector<buffer> spare_;
};

// One posted send or receive.
template <class WireState = no_wire_state>
struct operation {
  op_type type = op_type::send;
  op_state state = op_state::posted;
  int peer = -1;
  message_tag tag{};
  std::size_t bytes = 0;             // what a send sends, what a receive expects
  std::size_t moved = 0;             // a send's bytes the wire has moved so far
  std::span<const std::byte> out{};  // send
  std::span<std::byte> in{};         // recv
  chunk_sink sink{};                 // recv_reduce
  std::size_t granule = 1;
  std::vector<std::byte> carry;      // a fused receive's element split between two pieces
  std::exception_ptr failure;
  WireState wire{};
};

// Messages that arrive before their receive is posted are kept if small, up to a
// budget per peer; larger ones are held by the wire. {0, 0} keeps none.
struct early_limits {
  std::size_t message_bytes = 64 * 1024;  // largest message kept before its receive is posted
  std::size_t bytes_per_peer = 4u << 20;  // most early bytes kept from one peer
};

// Where an arriving message goes.
enum class landing : std::uint8_t {
  receive,  // into the posted receive it matched
  early,    // into an early buffer, until its receive is posted
  discard,  // nowhere: its receive failed or was cancelled; the wire still consumes it
  held,     // not yet: the wire keeps it and offers it again after the next receive is posted
};

// open: in use. departed: the peer closed its communicator. lost: the peer vanished.
// broken: the link is out of step (a transfer given up halfway, a malformed frame).
enum class link_state : std::uint8_t { open, departed, lost, broken };

// What a cancelled operation was doing, for the wire to undo its own part.
struct cancellation {
  op_type type = op_type::send;
  op_state state = op_state::posted;
  int peer = -1;
  bool mid_message = false;  // a receive its peer's message was arriving into
};

template <class WireState = no_wire_state, class Bytes = host_bytes>
class matching_engine {
 public:
  using op = operation<WireState>;

  matching_engine(int rank, int size, early_limits limits, Bytes bytes = {})
      : rank_(rank), size_(size), limits_(limits), bytes_(std::move(bytes)) {}
  matching_engine(const matching_engine&) = delete;
  matching_engine& operator=(const matching_engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  op& at(std::uint32_t slot) { return *ops_[slot]; }
  const op& at(std::uint32_t slot) const { return *ops_[slot]; }

  // "rank R: ", the start of every message this rank throws.
  std::string who() const { return "rank " + std::to_string(rank_) + ": "; }

  // ---- posting ------------------------------------------------------------------

  // The wire queues the send and moves its bytes.
  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    check_peer(peer);
    const std::uint32_t slot = take(op_type::send, peer, tag, data.size());
    at(slot).out = data;
    return slot;
  }

  // Takes the oldest early message with the tag at once, if one came first.
  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    check_peer(peer);
    const std::uint32_t slot = take(op_type::recv, peer, tag, into.size());
    at(slot).in = into;
    accept(slot);
    return slot;
  }

  std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    check_peer(peer);
    const std::uint32_t slot = take(op_type::recv_reduce, peer, tag, bytes);
    at(slot).sink = sink;
    at(slot).granule = std::max<std::size_t>(granule, 1);
    accept(slot);
    return slot;
  }

  // ---- arrivals, in the order each peer sent them -------------------------------

  // A message from `peer` starts. Unless held, the wire then delivers its bytes
  // (none for an empty message, which is complete at once).
  // `beyond_limits`: kept early whatever its size (the peer sends nothing more).
  landing begin_message(int peer, message_tag tag, std::size_t bytes, bool beyond_limits = false) {
    peer_state& p = contact(peer);
    incoming_message& m = p.incoming;
    m = {.active = true, .into = landing::discard, .tag = tag, .bytes = bytes};
    if (aborted()) {  // no receive will come: taken in and dropped, so the link reads on
      if (bytes == 0) finish_message(p);
      return landing::discard;
    }
    if (const auto match = std::find_if(p.posted.begin(), p.posted.end(), [&](std::uint32_t r) { return at(r).tag == tag; });
        match != p.posted.end()) {
      const std::uint32_t slot = *match;
      p.posted.erase(match);
      if (p.posted.empty() && p.posted.capacity() > kept_slots) {  // given back as the slots are
        p.posted.clear();
        p.posted.shrink_to_fit();  // (assigning {} would keep the capacity)
      }
      op& o = at(slot);
      m.expected = o.bytes;
      if (o.bytes != bytes) {
        fail_size(o, bytes);
      } else {
        o.state = op_state::moving;
        m.into = landing::receive;
        m.receive = slot;
      }
    } else if (!beyond_limits &&
               (bytes > limits_.message_bytes || p.early_bytes + bytes > limits_.bytes_per_peer || limits_.bytes_per_peer == 0)) {
      m.active = false;
      return landing::held;
    } else {
      p.early.push_back({tag, bytes_.take(bytes), bytes});
      p.early_bytes += bytes;
      m.into = landing::early;
      m.early_index = p.early.size() - 1;
    }
    const landing into = m.into;
    if (bytes == 0) finish_message(p);
    return into;
  }

  // True while a message from `peer` is arriving (begun, not all delivered).
  bool in_message(int peer) const { return known(peer).incoming.active; }
  const message_tag& message_tag_of(int peer) const { return known(peer).incoming.tag; }
  std::size_t message_bytes(int peer) const { return known(peer).incoming.bytes; }
  std::size_t message_moved(int peer) const { return known(peer).incoming.moved; }
  // What the receive the arriving message matched expects, whether or not it fits.
  std::size_t expected_bytes(int peer) const { return known(peer).incoming.expected; }
  // The receive the arriving message lands in, or no_slot.
  std::uint32_t receiving(int peer) const {
    const incoming_message& m = known(peer).incoming;
    return m.active && m.into == landing::receive ? m.receive : no_slot;
  }

  // The next bytes of the arriving message. True once it is complete.
  bool deliver(int peer, std::span<const std::byte> piece) {
    peer_state& p = contact(peer);
    incoming_message& m = p.incoming;
    if (m.into == landing::receive) {
      op& o = at(m.receive);
      deliver_to(o, m.moved, piece);
      if (o.state == op_state::failed) m.into = landing::discard;
    } else if (m.into == landing::early && !piece.empty()) {
      bytes_.copy(early_data(p.early[m.early_index]) + m.moved, piece.data(), piece.size());
    }
    m.moved += piece.size();
    if (m.moved < m.bytes) return false;
    finish_message(p);
    return true;
  }

  // Where a wire that can read straight into memory may put the arriving message's
  // next bytes: the rest of a plain receive's buffer, or nothing.
  std::span<std::byte> direct_destination(int peer) {
    const incoming_message& m = known(peer).incoming;
    if (!m.active || m.into != landing::receive || at(m.receive).type != op_type::recv) return {};
    return at(m.receive).in.subspan(m.moved);
  }
  // The wire put `n` bytes at direct_destination(peer). True once the message is complete.
  bool delivered_directly(int peer, std::size_t n) {
    peer_state& p = contact(peer);
    p.incoming.moved += n;
    if (p.incoming.moved < p.incoming.bytes) return false;
    finish_message(p);
    return true;
  }

  // ---- completion ---------------------------------------------------------------

  // True once the operation is done (its slot is then free); throws its failure, or
  // the group's, or its link's. The wire has made what progress it can before.
  bool finish(std::uint32_t& slot) {
    op& o = at(slot);
    if (o.state == op_state::done) {
      release(slot);
      return true;
    }
    if (o.state == op_state::failed) std::rethrow_exception(o.failure);
    throw_if_broken();
    throw_if_link_down(o);
    return false;
  }

  // Gives the operation up: it is no longer matched or delivered to, and its slot is
  // free. The wire undoes its own part from what this returns.
  cancellation cancel(std::uint32_t& slot) noexcept {
    op& o = at(slot);
    peer_state& p = contact(o.peer);
    cancellation c{o.type, o.state, o.peer, false};
    if (o.type != op_type::send) {
      std::erase(p.posted, slot);
      for (auto& e : p.early)
        if (e.claimed_by == slot) e.claimed_by = no_slot;  // it goes to the next receive with its tag
      if (p.incoming.active && p.incoming.into == landing::receive && p.incoming.receive == slot) {
        p.incoming.into = landing::discard;
        c.mid_message = true;
      }
    }
    release(slot);
    return c;
  }

  // ---- the group's and the links' health -----------------------------------------

  // Thread-safe. The first rank to abort is the one named (or `from_outside`, for an
  // abort that no rank of the group made).
  static constexpr int from_outside = -2;
  void note_abort(int by) {
    int none = -1;
    aborted_by_.compare_exchange_strong(none, by);
  }
  int aborted_by() const { return aborted_by_.load(std::memory_order_relaxed); }

  // The first failure this rank learned of, seen here or told by a peer: the one its
  // errors name first, and the one it tells its peers. `why` begins with the rank it
  // names ("lost rank 2: ..."), after this rank's own "rank R: ".
  struct failure {
    int rank = -1;
    bool gone = false;  // `rank` is lost for good, not merely failed in a call
    std::string why;
  };
  const std::optional<failure>& first_failure() const { return first_failure_; }
  bool note_failure(failure f) {
    if (first_failure_) return false;
    first_failure_ = std::move(f);
    return true;
  }

  // This rank's own first failed call, `what` being its error's text; true if first.
  bool note_own_failure(std::string_view what) {
    if (own_failure_) return false;
    if (const std::string own = who(); what.starts_with(own)) what.remove_prefix(own.size());
    own_failure_ = failure{rank_, false, "rank " + std::to_string(rank_) + " failed: " +
                                             (what.empty() ? std::string("a call failed") : std::string(what))};
    return true;
  }
  const std::optional<failure>& own_failure() const { return own_failure_; }

  // Why this rank leaves, for its peers: the first failure it knows; else its own
  // call's; else the exception its program leaves by (the transport is destroyed while
  // unwinding); nothing if it merely leaves.
  std::optional<failure> reason_to_leave() const {
    if (first_failure_) return first_failure_;
    if (own_failure_) return own_failure_;
    if (std::uncaught_exceptions() > 0)
      return failure{rank_, false, "rank " + std::to_string(rank_) +
                                       " failed: its program threw an exception out of its communicator's scope"};
    return std::nullopt;
  }

  // A peer, `from`, told this rank of its first failure. A rank it says is gone is
  // lost here too (so calls fail now, not when its own link says so); a failure of
  // `from` itself is only remembered, for when it leaves. Word of this rank's own
  // loss is someone else's broken link, not news. Word passed on names the rank that
  // saw the failure, once, however many ranks relayed it.
  void hear(int from, failure f) {
    if (f.rank < 0 || f.rank >= size_ || f.rank == rank_) return;
    if (f.rank != from && f.why.find(reported_by) == std::string::npos) f.why.append(reported_by).append(std::to_string(from)).append(")");
    if (f.gone) lose(f.rank, f.why);
    note_failure(std::move(f));  // lose() noted it, unless this rank's link to it had ended already
  }

  // The link to `peer` is down, `why` says how (after "rank R: "). Only the first
  // change counts. lose() returns true when this is the group's first lost peer.
  bool lose(int peer, std::string why) {
    if (!set_link(peer, link_state::lost, why)) return false;
    note_failure({peer, true, std::move(why)});
    if (first_lost_ >= 0) return false;
    first_lost_ = peer;
    return true;
  }
  void depart(int peer, std::string why) { set_link(peer, link_state::departed, std::move(why)); }
  void break_link(int peer, std::string why) { set_link(peer, link_state::broken, std::move(why)); }
  link_state link(int peer) const { return known(peer).link; }
  const std::string& link_story(int peer) const { return known(peer).why; }
  int first_lost() const { return first_lost_; }

  bool aborted() const { return aborted_by() != -1; }
  bool broken() const { return aborted() || first_lost_ >= 0; }

  // A receive whose op threw here is this rank's own failure: it comes first, before
  // the abort that a peer, told of it, may already have made.
  void throw_if_broken() const {
    if (failed_here_ && failed_here_->state == op_state::failed) std::rethrow_exception(failed_here_->failure);
    if (const int by = aborted_by(); by >= 0)
      throw error(errc::aborted, who() + "the group was aborted by " + (by == rank_ ? "this rank" : "rank " + std::to_string(by)));
    if (aborted()) throw error(errc::aborted, who() + "the group was aborted");
    if (first_lost_ >= 0) throw error(errc::peer_lost, who() + story(link_story(first_lost_)));
  }

  // What happened to a link, told after the first failure when that came before it:
  // a survivor names the rank that failed first, not the one that left because of it.
  std::string story(const std::string& what) const {
    if (!first_failure_ || first_failure_->why == what) return what;
    return first_failure_->why + "; then " + what;
  }

  // An operation whose peer has left or whose link is out of step can't finish. A peer
  // that left while this rank still had a message for or from it is the failure this
  // rank tells the others first, as lost: it left first, this rank leaves because of it.
  void throw_if_link_down(const op& o) {
    if (links_down_ == 0) return;  // the common case, without a lookup per poll
    const peer_state& p = known(o.peer);
    switch (p.link) {
      case link_state::open: return;
      case link_state::departed: {
        const char* way = o.type == op_type::send ? "for" : "from";
        const bool first = note_failure({o.peer, true, "lost rank " + std::to_string(o.peer) + ": it closed its communicator while rank " +
                                                           std::to_string(rank_) + " still had a message " + way + " it"});
        const std::string what = p.why + " while this rank still had a message " + way + " it";
        throw error(errc::peer_lost, who() + (first ? what : story(what)));
      }
      case link_state::lost: throw error(errc::peer_lost, who() + story(p.why));
      case link_state::broken: throw error(errc::protocol_error, who() + story(p.why));
    }
  }

  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw error(errc::invalid_peer, who() + "peer " + std::to_string(peer) + " is not another rank of a group of " +
                                          std::to_string(size_));
  }

  // A message whose size isn't what its receive expects fails that receive only.
  void fail_size(op& o, std::size_t sent) {
    fail(o, sent > o.bytes ? errc::message_truncated : errc::buffer_size_mismatch,
         "rank " + std::to_string(o.peer) + " sent " + std::to_string(sent) + " bytes where " + std::to_string(o.bytes) +
             " were expected; do all ranks pass the same counts?");
  }
  // The receiver refused a send for its size (a wire whose senders learn of it).
  void fail_refused(op& o, std::size_t expected) {
    fail(o, errc::buffer_size_mismatch, "rank " + std::to_string(o.peer) + " expected " + std::to_string(expected) +
                                            " bytes of this message; do all ranks pass the same counts?");
  }
  void fail(op& o, errc code, const std::string& why) {
    o.state = op_state::failed;
    o.failure = std::make_exception_ptr(error(code, who() + why));
  }

  // Bytes for a receive at `offset`: copied, or handed to a fused receive's sink in
  // whole elements (an element split between pieces waits in `carry`). The user's
  // op may throw: that fails the receive.
  void deliver_to(op& o, std::size_t offset, std::span<const std::byte> piece) {
    try {
      if (o.type == op_type::recv) {
        bytes_.copy(o.in.data() + offset, piece.data(), piece.size());
      } else {
        feed_sink(o, offset, piece);
      }
    } catch (...) {
      o.state = op_state::failed;
      o.failure = std::current_exception();
      failed_here_ = &o;
    }
  }

 private:
  static constexpr std::string_view reported_by = " (reported by rank ";

  struct early_message {
    message_tag tag{};
    typename Bytes::buffer storage;
    std::size_t size = 0;
    std::size_t arrived = 0;
    std::uint32_t claimed_by = no_slot;  // a receive posted while it was arriving
    bool refused = false;                // claimed by a receive of another size: dropped once complete
    bool complete() const { return arrived == size; }
  };

  static std::byte* early_data(early_message& e) { return Bytes::data(e.storage); }
  static std::span<const std::byte> early_bytes(early_message& e) { return {early_data(e), e.size}; }

  struct incoming_message {
    bool active = false;
    landing into = landing::discard;
    message_tag tag{};
    std::size_t bytes = 0, moved = 0;
    std::uint32_t receive = no_slot;  // landing::receive
    std::size_t expected = 0;         // what the matched receive expects
    std::size_t early_index = 0;      // landing::early
  };

  struct peer_state {
    std::vector<std::uint32_t> posted;  // receives not matched yet, in posting order
    std::vector<early_message> early;   // in arrival order
    std::size_t early_bytes = 0;
    incoming_message incoming;
    link_state link = link_state::open;
    std::string why;
  };

  static void feed_sink(op& o, std::size_t offset, std::span<const std::byte> piece) {
    const std::size_t g = o.granule;
    if (!o.carry.empty()) {  // complete the element the last piece split
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

  std::uint32_t take(op_type type, int peer, message_tag tag, std::size_t bytes) {
    if (free_.empty()) {
      ops_.push_back(std::make_unique<op>());
      free_.push_back(std::uint32_t(ops_.size() - 1));
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    op& o = *ops_[slot];
    o.type = type;
    o.state = op_state::posted;
    o.peer = peer;
    o.tag = tag;
    o.bytes = bytes;
    o.moved = 0;
    o.out = {};
    o.in = {};
    o.sink = {};
    o.granule = 1;
    o.carry.clear();  // keeps its capacity
    o.failure = nullptr;  // the wire sets up its own state, `o.wire`, when it posts
    return slot;
  }

  void release(std::uint32_t& slot) noexcept {
    if (ops_[slot].get() == failed_here_) failed_here_ = nullptr;
    free_.push_back(slot);  // the pool grows with the peak of posted operations
    slot = no_slot;
    // A peak of many (a ring of a large group posts all its receives at once) is given
    // back once it has passed, so that an idle rank holds little; a few stay for the
    // next call. Nothing refers to a free slot.
    if (free_.size() == ops_.size() && ops_.size() > kept_slots) {
      ops_.clear();
      ops_.shrink_to_fit();
      free_.clear();
      free_.shrink_to_fit();
    }
  }

  // A new receive: the oldest early message with its tag is its message.
  void accept(std::uint32_t slot) {
    op& o = at(slot);
    peer_state& p = contact(o.peer);
    for (std::size_t i = 0; i < p.early.size(); ++i) {
      early_message& e = p.early[i];
      if (!(e.tag == o.tag) || e.claimed_by != no_slot || e.refused) continue;
      if (e.size != o.bytes) {
        fail_size(o, e.size);
        if (e.complete()) drop_early(p, i);
        else e.refused = true;
      } else if (e.complete()) {
        deliver_to(o, 0, early_bytes(e));
        if (o.state != op_state::failed) o.state = op_state::done;
        drop_early(p, i);
      } else {
        e.claimed_by = slot;
      }
      return;
    }
    p.posted.push_back(slot);
  }

  void finish_message(peer_state& p) {
    incoming_message& m = p.incoming;
    m.active = false;
    if (m.into == landing::receive) {
      op& o = at(m.receive);
      if (o.state == op_state::moving) o.state = op_state::done;
    } else if (m.into == landing::early) {
      early_message& e = p.early[m.early_index];
      e.arrived = e.size;
      if (e.refused) {
        drop_early(p, m.early_index);
      } else if (e.claimed_by != no_slot) {
        op& o = at(e.claimed_by);
        deliver_to(o, 0, early_bytes(e));
        if (o.state != op_state::failed) o.state = op_state::done;
        drop_early(p, m.early_index);
      }
    }
  }

  void drop_early(peer_state& p, std::size_t i) {
    p.early_bytes -= p.early[i].size;
    bytes_.give_back(std::move(p.early[i].storage));
    p.early.erase(p.early.begin() + std::ptrdiff_t(i));
    if (p.incoming.active && p.incoming.into == landing::early && p.incoming.early_index > i) --p.incoming.early_index;
  }

  peer_state& contact(int peer) {
    if (peer_state* p = recent(peer)) return *p;
    return remember(peer, peers_[peer]);
  }
  // A peer this rank has not been in contact with has the state of a fresh one.
  const peer_state& known(int peer) const {
    static const peer_state fresh;
    if (const peer_state* p = recent(peer)) return *p;
    const auto it = peers_.find(peer);
    return it == peers_.end() ? fresh : remember(peer, const_cast<peer_state&>(it->second));
  }

  // The two peers looked up last (a ring's two neighbours, a pair's one), so that a
  // small message costs no hash lookup. Entries of peers_ are never erased, and a
  // node's address survives rehashing.
  peer_state* recent(int peer) const {
    if (recent_[0].peer == peer) return recent_[0].state;
    if (recent_[1].peer == peer) return recent_[1].state;
    return nullptr;
  }
  peer_state& remember(int peer, peer_state& state) const {
    recent_[1] = recent_[0];
    recent_[0] = {peer, &state};
    return state;
  }

  bool set_link(int peer, link_state state, std::string why) {
    peer_state& p = contact(peer);
    if (p.link != link_state::open) return false;
    p.link = state;
    ++links_down_;
    p.why = std::move(why);
    return true;
  }

  int rank_, size_;
  early_limits limits_;
  Bytes bytes_;  // before the early messages, so that it outlives their buffers
  // Made on first contact, so that a rank of a large group holds state only for the
  // peers its schedules reach (a ring's two, a tree's few), not for every rank.
  std::unordered_map<int, peer_state> peers_;
  struct recent_peer {
    int peer = -1;
    peer_state* state = nullptr;
  };
  mutable recent_peer recent_[2];
  static constexpr std::size_t kept_slots = 32;
  std::vector<std::unique_ptr<op>> ops_;
  std::vector<std::uint32_t> free_;
  const op* failed_here_ = nullptr;  // a receive whose op threw, until it is released
  std::atomic<int> aborted_by_{-1};
  int first_lost_ = -1;
  int links_down_ = 0;  // peers whose link is no longer open
  std::optional<failure> first_failure_, own_failure_;
};

}  // namespace collectives::transport_detail
