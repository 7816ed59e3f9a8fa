// device_ipc's wire: device messages between the processes of one host, under the
// matching engine. Each rank exports a block of device memory, its inbox, with
// `slots` slots of `slot_bytes` for each sender, and maps every peer's. A sender
// copies a message into its slots of the receiver's inbox a chunk at a time and,
// once a chunk's copy has finished, says so with a notice over shm ("chunk ready").
// The receiver hands the chunks to the matching engine in the order they came; the
// engine copies each where it lands (the receive's buffer, or an early buffer in
// device memory), and once that copy has finished the slot goes back to the sender
// with a notice ("slot free"). A message too large to keep early waits in the inbox
// until its receive is posted.
//
// Why a sender confirms its copy finished before it says "ready": the receiver then
// never waits on another process's stream, so a peer that dies mid-copy can only
// cost the survivor a timeout, never a hang on the device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <list>
#include <span>
#include <string>
#include <vector>

#include "../../concepts/device_runtime.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "../detail/matching.hpp"
#include "../shm/transport.hpp"
#include "device_bytes.hpp"
#include "options.hpp"

namespace collectives::device_ipc_detail {

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::no_slot;
using transport_detail::op_state;
using transport_detail::op_type;

inline constexpr std::uint32_t no_inbox_slot = ~std::uint32_t(0);

struct notice {
  enum kind_t : std::uint32_t { chunk_ready = 1, slot_free = 2, gave_up = 3 };
  std::uint32_t kind = 0;
  std::uint32_t slot = no_inbox_slot;  // chunk_ready: where the chunk is (none for an empty message)
  std::uint64_t call = 0;              // chunk_ready: the message's tag
  std::uint64_t step = 0;
  std::uint64_t offset = 0, bytes = 0, total = 0;  // chunk_ready: the chunk's place, the message's size
};

// The notices between two ranks are numbered, so each is matched to its own receive.
inline message_tag notice_tag(std::uint64_t sequence) {
  return {reserved_call::device_notices | (sequence >> 32), static_cast<std::uint32_t>(sequence)};
}

template <class Runtime>
class wire {
  using marker = typename Runtime::marker;

  // What the wire keeps of each device operation.
  struct op_extra {
    std::size_t unannounced = 0;  // sending: chunks whose notice shm has not taken yet
    marker settled{};             // receiving: made once the engine has it all; reached when its copies are
    bool settling = false;
  };
  using engine = transport_detail::matching_engine<op_extra, device_bytes<Runtime>>;
  using op = typename engine::op;

 public:
  wire(shm host, Runtime runtime, const device_ipc_options& options)
      : host_(std::move(host)), runtime_(std::move(runtime)), options_(checked(options)),
        match_(host_.rank(), host_.size(), options_.early, device_bytes<Runtime>(runtime_)), links_(std::size_t(size())) {}
  wire(const wire&) = delete;
  wire& operator=(const wire&) = delete;

  ~wire() {
    runtime_.synchronize();
    for (auto& link : links_) {
      if (link.listening) host_.cancel(link.incoming_req);
      for (auto& c : link.outbound) runtime_.forget(c.copied);
      if (link.mapping) runtime_.close(link.mapping);
    }
    for (auto& n : outgoing_) host_.cancel(n.req);
    for (auto& c : credits_due_) runtime_.forget(c.copied);
    for (std::uint32_t s : settling_) runtime_.forget(match_.at(s).wire.settled);
    if (inbox_) runtime_.free_exported(inbox_);
  }

  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }
  shm& host() noexcept { return host_; }
  Runtime& runtime() noexcept { return runtime_; }
  const Runtime& runtime() const noexcept { return runtime_; }
  const device_ipc_options& options() const noexcept { return options_; }

  // Exports the inbox, sends its handle to every peer over shm, maps theirs.
  void connect(deadline until) {
    const int n = size();
    if (n == 1) return;
    using handle = typename Runtime::handle;
    handle mine{};
    inbox_ = static_cast<std::byte*>(runtime_.allocate_exported(std::size_t(n) * region_bytes(), mine));
    std::vector<handle> theirs(static_cast<std::size_t>(n));
    std::vector<shm::request> reqs;
    const message_tag tag{reserved_call::device_handles, 0};
    for (int p = 0; p < n; ++p) {
      if (p == rank()) continue;
      reqs.push_back(host_.post_send(p, tag, std::as_bytes(std::span<const handle>(&mine, 1))));
      reqs.push_back(host_.post_recv(p, tag, std::as_writable_bytes(std::span<handle>(theirs.data() + p, 1))));
    }
    for (std::size_t done = 0; done < reqs.size();) {
      done = 0;
      for (auto& r : reqs) done += r.slot == no_slot || host_.test(r);  // a finished test frees the slot
      if (done < reqs.size() && (clock::now() >= until || !host_.wait_for_activity(until))) {
        for (auto& r : reqs) host_.cancel(r);
        throw error(errc::timeout, who() + "timed out exchanging inbox handles with its peers");
      }
    }
    for (int p = 0; p < n; ++p) {
      if (p == rank()) continue;
      peer_link& link = links_[std::size_t(p)];
      link.mapping = runtime_.open(theirs[std::size_t(p)]);
      link.inbox_for_me = static_cast<std::byte*>(link.mapping) + std::size_t(rank()) * region_bytes();
      link.slot_free.assign(options_.slots, true);
    }
  }

  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    const std::uint32_t s = match_.post_send(peer, tag, data);
    match_.at(s).wire = {};
    ++live_;
    links_[std::size_t(peer)].sends.push_back(s);
    listen_to(peer);
    dispatch(peer);
    return s;
  }

  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    const std::uint32_t r = match_.post_recv(peer, tag, into);  // may take an early message at once
    match_.at(r).wire = {};
    ++live_;
    listen_to(peer);
    hand_over(peer);  // a message waiting in the inbox may be this one's
    return r;
  }

  // True once done (the slot is then free); throws the operation's failure, the
  // group's, or, where the peer is gone, shm's account of that.
  bool test(std::uint32_t& slot) {
    progress();
    op& o = match_.at(slot);
    if (o.state != op_state::done && o.state != op_state::failed)
      if (const auto& gone = links_[std::size_t(o.peer)].host_failure) std::rethrow_exception(gone);
    if (o.type == op_type::recv && o.state == op_state::done && !settled(slot)) return false;
    const bool done = match_.finish(slot);
    if (done) --live_;
    return done;
  }

  void cancel(std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    runtime_.synchronize();  // no copy may touch the caller's buffer once this returns
    const std::uint32_t s = slot;
    forget_settling(s);
    const cancellation c = match_.cancel(slot);
    --live_;
    peer_link& link = links_[std::size_t(c.peer)];
    for (auto& n : outgoing_)
      if (n.op == s) n.op = no_slot;  // notices already with shm still go: the peer counts on them
    if (c.type == op_type::send) {
      std::erase(link.sends, s);
      if (c.state == op_state::moving) give_up_sending(c.peer, s);
      else std::erase_if(link.outbound, [&](const outbound_chunk& o) { return o.op == s; });  // an empty message's notice
    } else if (c.mid_message) {
      match_.break_link(c.peer, "this rank gave up on a message from rank " + std::to_string(c.peer) + " halfway through");
    }
  }

  // Notices are read from every peer at every step, whatever this rank waits for, so
  // that the chunks of messages it has not asked for yet leave the inbox as early
  // messages and their senders do not wait on it.
  void progress() {
    for (int p = 0; p < size(); ++p)
      if (p != rank()) read_notices(p);
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      hand_over(p);
      dispatch(p);
      announce(p);
    }
    give_back_slots();
    flush_notices();
  }

  // Anything on its way that host-only progress should keep moving.
  bool busy() const { return live_ > 0 || !outgoing_.empty() || !credits_due_.empty(); }

  // A device copy is under way: nothing wakes a waiter when it finishes.
  bool copying() const {
    for (const auto& link : links_)
      if (!link.outbound.empty()) return true;
    return !credits_due_.empty() || !settling_.empty();
  }

 private:
  // A chunk on its way out: copied into the peer's slot (an empty message has no
  // copy); its notice goes once the copy is done, in the order dispatched.
  struct outbound_chunk {
    std::uint32_t op = no_slot;
    std::uint32_t slot = no_inbox_slot;
    message_tag tag{};
    std::size_t offset = 0, bytes = 0, total = 0;
    marker copied{};
  };

  // A chunk of this rank's inbox being copied out; its slot goes back once done.
  struct credit {
    int peer = 0;
    std::uint32_t slot = 0;
    marker copied{};
  };

  struct outgoing_notice {
    notice body;
    shm::request req;
    int peer = 0;
    std::uint32_t op = no_slot;  // the send it announces a chunk of, if any
  };

  struct peer_link {
    std::byte* inbox_for_me = nullptr;  // the peer's inbox region for this rank, mapped here
    void* mapping = nullptr;
    std::vector<bool> slot_free;        // this rank's slots in the peer's inbox
    std::deque<std::uint32_t> sends;    // device sends not yet wholly dispatched, in posting order
    std::deque<outbound_chunk> outbound;
    std::deque<notice> arrived;         // chunks not yet handed to the engine: they wait in the inbox
    std::uint64_t notices_sent = 0, notices_received = 0;
    notice incoming{};
    shm::request incoming_req{};
    bool listening = false;
    std::exception_ptr host_failure;  // the peer's notices stopped: it left, or died (shm's words)
  };

  static device_ipc_options checked(device_ipc_options o) {
    o.slots = std::max<std::size_t>(o.slots, 1);
    o.slot_bytes = std::max<std::size_t>(o.slot_bytes, 256);
    return o;
  }

  std::string who() const { return "device_ipc rank " + std::to_string(rank()) + ": "; }
  std::size_t region_bytes() const { return options_.slots * options_.slot_bytes; }
  std::byte* my_slot(int sender, std::uint32_t slot) const {
    return inbox_ + std::size_t(sender) * region_bytes() + std::size_t(slot) * options_.slot_bytes;
  }

  void listen_to(int peer) {
    peer_link& link = links_[std::size_t(peer)];
    if (link.listening || link.host_failure) return;
    link.incoming_req = host_.post_recv(peer, notice_tag(link.notices_received), std::as_writable_bytes(std::span{&link.incoming, 1}));
    link.listening = true;
  }

  // A peer that has closed its communicator sends nothing more; that is a failure
  // only for this rank's device operations with it that are not done.
  void read_notices(int p) {
    peer_link& link = links_[std::size_t(p)];
    while (!link.host_failure) {
      listen_to(p);
      try {
        if (!host_.test(link.incoming_req)) return;
      } catch (const error& e) {
        if (e.code() != errc::peer_lost) throw;
        host_.cancel(link.incoming_req);
        link.listening = false;
        link.host_failure = std::current_exception();
        return;
      }
      link.listening = false;
      ++link.notices_received;
      take_notice(p, link.incoming);
    }
  }

  void take_notice(int p, const notice& n) {
    peer_link& link = links_[std::size_t(p)];
    const bool empty = n.bytes == 0;
    switch (n.kind) {
      case notice::slot_free:
        if (n.slot >= options_.slots) return malformed(p);
        link.slot_free[n.slot] = true;
        return;
      case notice::chunk_ready:
        if ((empty ? n.slot != no_inbox_slot : n.slot >= options_.slots) || n.bytes > options_.slot_bytes ||
            n.offset > n.total || n.bytes > n.total - n.offset || n.step > UINT32_MAX)
          return malformed(p);
        link.arrived.push_back(n);
        return;
      case notice::gave_up:
        match_.break_link(p, "rank " + std::to_string(p) + " gave up halfway through a message to this rank");
        return;
      default: return malformed(p);
    }
  }

  void malformed(int p) {
    match_.break_link(p, "rank " + std::to_string(p) + " sent a malformed device notice; build a new communicator");
  }

  // Hands the peer's chunks to the engine in the order they came, as far as it takes
  // them: a message it holds back waits in the inbox until its receive is posted.
  void hand_over(int p) {
    peer_link& link = links_[std::size_t(p)];
    while (!link.arrived.empty() && match_.link(p) != link_state::broken) {
      const notice& n = link.arrived.front();
      const message_tag tag{n.call, static_cast<std::uint32_t>(n.step)};
      if (!match_.in_message(p)) {
        if (n.offset != 0 || (n.bytes == 0) != (n.total == 0)) return malformed(p);
        if (match_.begin_message(p, tag, n.total) == landing::held) return;
      } else if (n.bytes == 0 || n.offset != match_.message_moved(p) || n.total != match_.message_bytes(p) ||
                 !(tag == match_.message_tag_of(p))) {
        return malformed(p);
      }
      if (n.bytes != 0) {
        match_.deliver(p, {my_slot(p, n.slot), n.bytes});
        credits_due_.push_back({p, n.slot, runtime_.mark()});
      }
      link.arrived.pop_front();
    }
  }

  // Sends to one peer take its free slots in the order they were posted, a chunk a slot.
  void dispatch(int p) {
    peer_link& link = links_[std::size_t(p)];
    if (match_.link(p) == link_state::broken) return;
    while (!link.sends.empty()) {
      const std::uint32_t s = link.sends.front();
      op& o = match_.at(s);
      if (o.bytes == 0) {
        link.outbound.push_back({.op = s, .tag = o.tag});
        ++o.wire.unannounced;
      }
      while (o.moved < o.bytes) {
        const auto free = std::find(link.slot_free.begin(), link.slot_free.end(), true);
        if (free == link.slot_free.end()) return;
        *free = false;
        const auto slot = static_cast<std::uint32_t>(free - link.slot_free.begin());
        const std::size_t n = std::min(options_.slot_bytes, o.bytes - o.moved);
        runtime_.copy(link.inbox_for_me + std::size_t(slot) * options_.slot_bytes, o.out.data() + o.moved, n);
        link.outbound.push_back({s, slot, o.tag, o.moved, n, o.bytes, runtime_.mark()});
        ++o.wire.unannounced;
        o.moved += n;
        o.state = op_state::moving;
      }
      link.sends.pop_front();
    }
  }

  // The notices of the chunks whose copy has finished, in the order dispatched.
  void announce(int p) {
    peer_link& link = links_[std::size_t(p)];
    while (!link.outbound.empty()) {
      outbound_chunk& c = link.outbound.front();
      if (c.bytes != 0 && !runtime_.reached(c.copied)) return;
      announce_chunk(p, c);
      link.outbound.pop_front();
    }
  }

  void announce_chunk(int p, outbound_chunk& c) {
    runtime_.forget(c.copied);
    post_notice(p, {notice::chunk_ready, c.slot, c.tag.call, c.tag.step, c.offset, c.bytes, c.total}, c.op);
  }

  // A send given up after some of it went: what was dispatched before it is announced
  // (every copy is done after the cancel's synchronize), the rest dropped, and the
  // peer told, so that its receive fails instead of waiting for the rest.
  void give_up_sending(int p, std::uint32_t s) {
    peer_link& link = links_[std::size_t(p)];
    try {
      for (; !link.outbound.empty() && link.outbound.front().op != s; link.outbound.pop_front())
        announce_chunk(p, link.outbound.front());
      post_notice(p, {.kind = notice::gave_up});
    } catch (...) {  // the link is given up below all the same
    }
    for (auto& c : link.outbound) runtime_.forget(c.copied);
    link.outbound.clear();
    link.sends.clear();
    match_.break_link(p, "this rank gave up on a message to rank " + std::to_string(p) + " halfway through");
  }

  void post_notice(int p, notice body, std::uint32_t announced_send = no_slot) {
    outgoing_notice& n = outgoing_.emplace_back(outgoing_notice{body, {}, p, announced_send});
    try {
      n.req = host_.post_send(p, notice_tag(links_[std::size_t(p)].notices_sent), std::as_bytes(std::span{&n.body, 1}));
    } catch (...) {
      outgoing_.pop_back();
      throw;
    }
    ++links_[std::size_t(p)].notices_sent;
  }

  // A notice for a peer that has gone is dropped: a slot it will not use, or a chunk
  // of a send whose test then reports the peer gone.
  void flush_notices() {
    std::erase_if(outgoing_, [&](outgoing_notice& n) {
      try {
        if (!host_.test(n.req)) return false;
      } catch (const error& e) {
        if (e.code() != errc::peer_lost) throw;
        host_.cancel(n.req);
        if (auto& gone = links_[std::size_t(n.peer)].host_failure; !gone) gone = std::current_exception();
        return true;
      }
      if (n.op != no_slot) {
        op& o = match_.at(n.op);
        if (--o.wire.unannounced == 0 && o.moved == o.bytes && o.state != op_state::failed) o.state = op_state::done;
      }
      return true;
    });
  }

  // The slots whose chunk has been copied out go back to their senders.
  void give_back_slots() {
    while (!credits_due_.empty() && runtime_.reached(credits_due_.front().copied)) {
      credit c = credits_due_.front();
      credits_due_.pop_front();
      runtime_.forget(c.copied);
      if (!links_[std::size_t(c.peer)].host_failure) post_notice(c.peer, {notice::slot_free, c.slot});
    }
  }

  // A receive the engine has wholly delivered is done once the copies into its buffer
  // are: a marker made now is reached after them.
  bool settled(std::uint32_t s) {
    op& o = match_.at(s);
    if (!o.wire.settling) {
      o.wire.settled = runtime_.mark();
      o.wire.settling = true;
      settling_.push_back(s);
    }
    if (!runtime_.reached(o.wire.settled)) return false;
    forget_settling(s);
    return true;
  }

  void forget_settling(std::uint32_t s) noexcept {
    op& o = match_.at(s);
    if (!o.wire.settling) return;
    runtime_.forget(o.wire.settled);
    o.wire.settling = false;
    std::erase(settling_, s);
  }

  shm host_;
  Runtime runtime_;
  device_ipc_options options_;
  engine match_;  // after the runtime, which its early buffers come from
  std::vector<peer_link> links_;
  std::list<outgoing_notice> outgoing_;  // stable: shm reads each body until its send completes
  std::deque<credit> credits_due_;       // in the order the copies were made
  std::vector<std::uint32_t> settling_;  // receives waiting for their last copies
  std::byte* inbox_ = nullptr;           // sender p's region starts at p * slots * slot_bytes
  std::size_t live_ = 0;                 // device operations posted and not yet finished
};

}  // namespace collectives::device_ipc_detail
