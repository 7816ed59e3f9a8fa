// Device messages between the processes of one host: each rank exports a block of
// device memory (its inbox), every other rank maps it, and a message is copied
// chunk by chunk into the receiver's inbox and from there into the destination. The
// shm transport carries everything else: host messages, and the small notices that
// say "chunk ready in slot k" and "slot k is free again".
//
// The protocol is written against a device runtime (concepts/device_runtime.hpp), so
// the same code runs on CUDA (cuda_ipc.hpp) and, for the tests, on host memory
// standing in for device memory (tests/device/host_runtime.hpp), where every step but
// the device itself can be checked on machines without a GPU.
//
// Why a sender confirms its copy finished before it says "ready": the receiver
// then never waits on another process's stream, so a peer that dies mid-copy can
// only cost the survivor a timeout, never a hang on the device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../concepts/device_runtime.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../memory_space.hpp"
#include "../settings.hpp"
#include "shm.hpp"

namespace collectives {

struct device_ipc_options {
  // Each rank's inbox has `slots` slots of `slot_bytes` for each sender: a message
  // moves a slot at a time, so this is the pipelining chunk.
  std::size_t slot_bytes = std::size_t(1) << 20;
  std::size_t slots = 4;

  // COLLECTIVES_DEVICE_SLOT_BYTES, COLLECTIVES_DEVICE_SLOTS.
  static device_ipc_options from_env() {
    device_ipc_options o;
    if (auto b = settings::byte_size("COLLECTIVES_DEVICE_SLOT_BYTES")) o.slot_bytes = *b;
    if (auto n = settings::whole_number("COLLECTIVES_DEVICE_SLOTS")) o.slots = static_cast<std::size_t>(*n);
    return o;
  }
};

namespace device_ipc_detail {

inline constexpr std::uint32_t no_slot = ~std::uint32_t(0);

struct notice {
  enum kind_t : std::uint32_t { chunk_ready = 1, slot_free = 2 };
  std::uint32_t kind = 0;
  std::uint32_t slot = no_slot;  // chunk_ready: where the chunk is (none for an empty message)
  std::uint64_t call = 0;        // chunk_ready: the message's tag
  std::uint64_t step = 0;
  std::uint64_t offset = 0, bytes = 0, total = 0;  // chunk_ready: the chunk's place, the message's size
};

inline message_tag notice_tag(std::uint64_t sequence) {
  return {reserved_call::device_notices | (sequence >> 32), static_cast<std::uint32_t>(sequence)};
}

}  // namespace device_ipc_detail

template <class Runtime>
class device_ipc {
  static_assert(check_device_runtime<Runtime>());
  using notice = device_ipc_detail::notice;
  static constexpr auto no_slot = device_ipc_detail::no_slot;

 public:
  using memory_space = typename Runtime::memory_space;
  // Estimates, not yet measured on a GPU: a message's start-up is an event poll and a
  // notice (some microseconds); bytes move at NVLink-class copy-engine rates.
  static constexpr link_costs costs{.latency_s = 10e-6, .per_message_s = 2e-6, .seconds_per_byte = 1.0 / 100e9,
                                    .reduce_seconds_per_byte = 1.0 / 200e9};
  // Of device messages (host messages are shm's): every early chunk is copied out of
  // its slot, whatever the message's size; a chunk in flight when its operation is
  // cancelled does not give its slot back.
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = std::size_t(-1),
                                           .large_early_message_blocks_peer = false,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::unspecified,
                                           .reports_departed_peer = true,
                                           .ranks_can_be_processes = true};

  // A host request goes to shm; a device one is an index into this rank's device operations.
  struct request {
    shm::request host{};
    std::uint32_t device = no_slot;
  };

  // Joins over `host` (which every rank of the group has made), exchanging inbox
  // handles through it. Blocks until every rank has mapped every peer's inbox.
  device_ipc(shm host, Runtime runtime, device_ipc_options options, deadline until)
      : state_(std::make_unique<state>(std::move(host), std::move(runtime), options)) {
    state_->connect(until);
  }

  // The job the launcher described, on this host: shm for the host side, and the
  // runtime's choice of device for this local rank.
  static device_ipc from_env(device_ipc_options options = device_ipc_options::from_env()) {
    const auto launch = bootstrap::detect_launch();
    const auto startup = shm_options::from_env().startup_timeout;
    shm host = shm::join(launch, auth::job_token::from_env());
    return device_ipc(std::move(host), Runtime::for_local_rank(launch.local_rank), options, clock::now() + startup);
  }

  int rank() const { return state_->host.rank(); }
  int size() const { return state_->host.size(); }
  shm& host() noexcept { return state_->host; }
  Runtime& runtime() noexcept { return state_->runtime; }
  const device_ipc_options& options() const noexcept { return state_->options; }

  memory_ops<memory_space> memory_operations(memory_space) { return state_->runtime.memory_operations(); }

  // Host messages.
  request post_send(int peer, message_tag tag, std::span<const std::byte> data) { return {state_->host.post_send(peer, tag, data)}; }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return {state_->host.post_recv(peer, tag, into)}; }

  // Device messages: `data` and `into` are device memory.
  request post_send(int peer, message_tag tag, std::span<const std::byte> data, memory_space) {
    return {{}, state_->post_device(peer, tag, const_cast<std::byte*>(data.data()), data.size(), true)};
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into, memory_space) {
    return {{}, state_->post_device(peer, tag, into.data(), into.size(), false)};
  }

  bool test(request& r) {
    if (r.device == no_slot) {
      if (state_->busy()) state_->progress();
      return state_->host.test(r.host);
    }
    state_->progress();
    return state_->finished(r.device);
  }

  bool wait_for_activity(deadline until) {
    // A device copy finishing wakes nobody: while one is pending, look again soon.
    if (state_->copying()) {
      std::this_thread::yield();
      return true;
    }
    return state_->host.wait_for_activity(until);
  }

  void cancel(request& r) noexcept {
    if (r.device == no_slot) state_->host.cancel(r.host);
    else state_->cancel(r.device);
    r.device = no_slot;
  }
  void abort() { state_->host.abort(); }

  std::string describe() const {
    return "device_ipc rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " on " + state_->runtime.describe() +
           ": inbox of " + std::to_string(state_->options.slots) + " slots of " + std::to_string(state_->options.slot_bytes >> 10) +
           " KiB per sender";
  }

 private:
  // A chunk being copied: into a peer's slot (sending), out of a slot or an early
  // chunk's buffer (receiving), or from a slot into an early chunk's buffer.
  struct chunk {
    std::uint32_t slot = no_slot;
    void* buffer = nullptr;  // an early chunk's private copy, freed once copied out
    std::size_t offset = 0, bytes = 0;
    typename Runtime::marker done{};
  };

  struct device_op {
    bool sending = false;
    int peer = 0;
    message_tag tag{};
    std::byte* data = nullptr;
    std::size_t total = 0;
    std::size_t dispatched = 0;  // sending: bytes handed to copies so far
    std::size_t notified = 0;    // receiving: bytes some chunk_ready has announced
    std::size_t arrived = 0;     // receiving: bytes whose copy into `data` finished
    bool announced = false;      // receiving: a first chunk_ready was seen (an empty message has only that)
    std::vector<chunk> copying;
    int unsent_notices = 0;  // notices this operation posted that shm has not yet taken
    std::exception_ptr failure;  // receiving: its message had another size
  };

  // The rest of a message whose receive failed for its size: its chunks are dropped
  // as they come (their slots given back), so they reach no later receive. They are
  // known by their message's size too: a chunk still waiting among the early ones
  // may be counted after a later message's chunk has come.
  struct rejected_message {
    int peer = 0;
    message_tag tag{};
    std::size_t total = 0, left = 0;
  };

  // A chunk that came before its receive was posted: copied out of the slot (which
  // is then freed) into a private buffer, where it waits.
  struct early_chunk {
    int peer = 0;
    message_tag tag{};
    std::size_t offset = 0, bytes = 0, total = 0;
    chunk copy{};
    bool held = false;  // the copy into `copy.buffer` has finished
  };

  struct outgoing_notice {
    notice body;
    shm::request req;
    int* unsent = nullptr;  // its operation's count, if it has one
    bool is_credit = false;
  };

  struct peer_state {
    std::byte* inbox_for_me = nullptr;  // the peer's inbox region for this rank, mapped here
    void* mapping = nullptr;
    std::vector<bool> slot_free;        // this rank's slots in the peer's inbox
    std::uint64_t notices_sent = 0, notices_received = 0;
    notice incoming{};
    shm::request incoming_req{};
    bool incoming_posted = false;
    bool closed = false;  // it closed its communicator: no more notices
  };

  struct state {
    shm host;
    Runtime runtime;
    device_ipc_options options;
    std::byte* inbox = nullptr;  // sender p's region starts at p * slots * slot_bytes
    std::vector<peer_state> peers;
    std::vector<std::unique_ptr<device_op>> ops;  // by request index; null when free
    std::vector<std::uint32_t> order;             // the live ones, in the order they were posted
    std::vector<early_chunk> early;
    std::vector<rejected_message> rejected;
    std::list<outgoing_notice> outgoing;  // stable: shm reads each body until its send completes

    state(shm h, Runtime r, device_ipc_options o) : host(std::move(h)), runtime(std::move(r)), options(o) {
      options.slots = std::max<std::size_t>(options.slots, 1);
      options.slot_bytes = std::max<std::size_t>(options.slot_bytes, 256);
    }
    state(const state&) = delete;
    state& operator=(const state&) = delete;

    ~state() {
      runtime.synchronize();
      for (auto& p : peers) {
        if (p.incoming_posted) host.cancel(p.incoming_req);
        if (p.mapping) runtime.close(p.mapping);
      }
      for (auto& o : outgoing) host.cancel(o.req);
      for (auto& e : early) release(e.copy);
      for (auto& o : ops)
        if (o) for (auto& c : o->copying) release(c);
      if (inbox) runtime.free_exported(inbox);
    }

    int size() const { return host.size(); }
    int rank() const { return host.rank(); }
    std::size_t region_bytes() const { return options.slots * options.slot_bytes; }

    std::string who() const { return "device_ipc rank " + std::to_string(rank()) + ": "; }

    // Exports the inbox, sends its handle to every peer, maps theirs.
    void connect(deadline until) {
      const int n = size();
      peers.resize(std::size_t(n));
      if (n == 1) return;
      typename Runtime::handle mine{};
      inbox = static_cast<std::byte*>(runtime.allocate_exported(std::size_t(n) * region_bytes(), mine));
      std::vector<typename Runtime::handle> theirs(static_cast<std::size_t>(n));
      std::vector<shm::request> reqs;
      const message_tag tag{reserved_call::device_handles, 0};
      for (int p = 0; p < n; ++p) {
        if (p == rank()) continue;
        using handle = typename Runtime::handle;
        reqs.push_back(host.post_send(p, tag, std::as_bytes(std::span<const handle>(&mine, 1))));
        reqs.push_back(host.post_recv(p, tag, std::as_writable_bytes(std::span<handle>(theirs.data() + p, 1))));
      }
      for (std::size_t done = 0; done < reqs.size();) {
        done = 0;
        for (auto& r : reqs) done += r.slot == shm_detail::no_slot || host.test(r);  // test releases: slot = none
        if (done < reqs.size() && (clock::now() >= until || !host.wait_for_activity(until))) {
          for (auto& r : reqs) host.cancel(r);
          throw error(errc::timeout, who() + "timed out exchanging inbox handles with its peers");
        }
      }
      for (int p = 0; p < n; ++p) {
        if (p == rank()) continue;
        peer_state& peer = peers[std::size_t(p)];
        peer.mapping = runtime.open(theirs[std::size_t(p)]);
        peer.inbox_for_me = static_cast<std::byte*>(peer.mapping) + std::size_t(rank()) * region_bytes();
        peer.slot_free.assign(options.slots, true);
      }
    }

    std::byte* my_slot(int sender, std::uint32_t slot) const {
      return inbox + std::size_t(sender) * region_bytes() + std::size_t(slot) * options.slot_bytes;
    }

    std::uint32_t post_device(int peer, message_tag tag, std::byte* data, std::size_t bytes, bool sending) {
      if (peer < 0 || peer >= size() || peer == rank())
        throw error(errc::invalid_peer, who() + "a device message needs a peer other than itself, got " + std::to_string(peer));
      auto op = std::make_unique<device_op>();
      op->sending = sending;
      op->peer = peer;
      op->tag = tag;
      op->data = data;
      op->total = bytes;
      std::uint32_t index = 0;
      while (index < ops.size() && ops[index]) ++index;
      if (index == ops.size()) ops.emplace_back();
      ops[index] = std::move(op);
      order.push_back(index);
      // Early chunks for a receive are handed over by the next test, not here: a size
      // that does not match then fails a request the caller holds and cancels.
      listen_to(peer);
      return index;
    }

    bool finished(std::uint32_t index) {
      device_op& o = *ops[index];
      if (o.failure) std::rethrow_exception(o.failure);
      const bool done = o.copying.empty() && o.unsent_notices == 0 &&
                        (o.sending ? o.dispatched == o.total && o.announced : o.announced && o.arrived == o.total);
      if (done) forget_op(index);
      return done;
    }

    void cancel(std::uint32_t index) noexcept {
      if (index >= ops.size() || !ops[index]) return;
      runtime.synchronize();  // nothing may still copy into or out of the caller's buffer
      for (auto& c : ops[index]->copying) release(c);
      for (auto& o : outgoing)
        if (o.unsent == &ops[index]->unsent_notices) o.unsent = nullptr;
      forget_op(index);
    }

    void forget_op(std::uint32_t index) noexcept {
      ops[index].reset();
      std::erase(order, index);
    }

    void release(chunk& c) noexcept {
      runtime.forget(c.done);
      if (c.buffer) runtime.free(c.buffer);
      c.buffer = nullptr;
    }

    bool busy() const {
      for (auto& o : ops)
        if (o) return true;
      return !early.empty() || !outgoing.empty();
    }

    bool copying() const {
      for (auto& o : ops)
        if (o && !o->copying.empty()) return true;
      for (auto& e : early)
        if (!e.held) return true;
      return false;
    }

    // Notices are read from every peer at every step, whatever this rank waits for,
    // so that chunks of messages it has not asked for yet leave the slots (for early
    // buffers) and their senders never wait on it: as with shm, a receive may be
    // posted in any order. A peer that has closed its communicator sends nothing more;
    // that is a loss only when this rank still waits for a notice from it.
    void listen_to(int peer) {
      peer_state& p = peers[std::size_t(peer)];
      if (p.incoming_posted) return;
      p.incoming_req = host.post_recv(peer, device_ipc_detail::notice_tag(p.notices_received),
                                      std::as_writable_bytes(std::span{&p.incoming, 1}));
      p.incoming_posted = true;
    }

    void progress() {
      for (int p = 0; p < size(); ++p)
        if (p != rank()) read_notices(p);
      for (std::uint32_t i : order) ops[i]->sending ? progress_send(*ops[i]) : progress_recv(*ops[i]);
      progress_early();
      flush_notices();
    }

    bool waits_for_notice(const device_op& o) const {
      if (!o.sending) return !o.announced || o.notified < o.total;
      const auto& free = peers[std::size_t(o.peer)].slot_free;
      return o.dispatched < o.total && std::find(free.begin(), free.end(), true) == free.end();
    }

    bool waits_for_notice_from(int p) const {
      for (auto& o : ops)
        if (o && o->peer == p && waits_for_notice(*o)) return true;
      return false;
    }

    void read_notices(int p) {
      peer_state& peer = peers[std::size_t(p)];
      while (!peer.closed) {
        listen_to(p);
        try {
          if (!host.test(peer.incoming_req)) return;
        } catch (const error& e) {
          if (e.code() != errc::peer_lost || waits_for_notice_from(p)) throw;
          peer.closed = true;
          return;
        }
        peer.incoming_posted = false;
        ++peer.notices_received;
        handle(p, peer.incoming);
      }
    }

    void handle(int p, const notice& n) {
      if (n.kind == notice::slot_free) {
        if (n.slot >= options.slots) throw error(errc::protocol_error, who() + "rank " + std::to_string(p) + " freed slot " + std::to_string(n.slot) + ", which does not exist");
        peers[std::size_t(p)].slot_free[n.slot] = true;
        return;
      }
      if (n.kind != notice::chunk_ready || (n.slot == no_slot && n.bytes != 0) || (n.slot != no_slot && n.slot >= options.slots) ||
          n.bytes > options.slot_bytes || n.offset > n.total || n.bytes > n.total - n.offset)
        throw error(errc::protocol_error, who() + "a malformed notice from rank " + std::to_string(p));
      const message_tag tag{n.call, static_cast<std::uint32_t>(n.step)};
      if (drop_rejected(p, tag, n.total, n.bytes)) {
        if (n.slot != no_slot) post_notice(p, {notice::slot_free, n.slot}, nullptr, true);
        return;
      }
      // Behind an early chunk of the same message stream, a chunk waits its turn among
      // the early ones: taken at once, it could go to a receive that the earlier
      // chunk's message is due to (and fail it for its size).
      const bool queued = std::any_of(early.begin(), early.end(), [&](const early_chunk& e) { return e.peer == p && e.tag == tag; });
      if (device_op* o = queued ? nullptr : posted_recv(p, tag)) {
        take_chunk(*o, n.slot == no_slot ? nullptr : my_slot(p, n.slot), n.slot, nullptr, n.offset, n.bytes, n.total);
        return;
      }
      early_chunk e{p, tag, std::size_t(n.offset), std::size_t(n.bytes), std::size_t(n.total), {}, n.bytes == 0};
      e.copy.slot = n.slot;
      if (n.bytes != 0) {
        e.copy.buffer = runtime.allocate(n.bytes);
        runtime.copy(e.copy.buffer, my_slot(p, n.slot), n.bytes);
        e.copy.done = runtime.mark();
      }
      early.push_back(e);
    }

    // Messages between two ranks with the same tag match in the order they were
    // posted (senders send them one after the other): a chunk belongs to the oldest
    // receive that still lacks some.
    device_op* posted_recv(int p, message_tag tag) {
      for (std::uint32_t i : order) {
        device_op& o = *ops[i];
        if (!o.sending && o.peer == p && o.tag == tag && !(o.announced && o.notified == o.total)) return &o;
      }
      return nullptr;
    }

    // A chunk of a message whose receive failed for its size: dropped.
    bool drop_rejected(int p, message_tag tag, std::size_t total, std::size_t bytes) {
      const auto r = std::find_if(rejected.begin(), rejected.end(),
                                  [&](const rejected_message& m) { return m.peer == p && m.tag == tag && m.total == total; });
      if (r == rejected.end()) return false;
      r->left -= std::min(r->left, bytes);
      if (r->left == 0) rejected.erase(r);
      return true;
    }

    // Sends to one peer take slots in the order they were posted. An empty message
    // has no chunk, only its notice, which must also wait until every earlier
    // message's notices have gone, or it would overtake them.
    bool earlier_send_unfinished(const device_op& o, bool until_announced = false) const {
      for (std::uint32_t i : order) {
        const device_op& earlier = *ops[i];
        if (&earlier == &o) return false;
        if (earlier.sending && earlier.peer == o.peer &&
            (earlier.dispatched < earlier.total || (until_announced && (!earlier.copying.empty() || !earlier.announced))))
          return true;
      }
      return false;
    }

    // Copies one chunk of a message into its receive, from a slot or an early buffer.
    void take_chunk(device_op& o, const std::byte* from, std::uint32_t slot, void* buffer, std::size_t offset,
                    std::size_t bytes, std::size_t total) {
      if (total != o.total) {  // the receive fails; the chunk's slot goes back to the sender all the same
        if (slot != no_slot) post_notice(o.peer, {notice::slot_free, slot}, nullptr, true);
        if (buffer) runtime.free(buffer);
        o.failure = std::make_exception_ptr(error(total > o.total ? errc::message_truncated : errc::buffer_size_mismatch,
                                                  who() + "rank " + std::to_string(o.peer) + " sent a device message of " +
                                                      std::to_string(total) + " bytes where " + std::to_string(o.total) +
                                                      " were expected"));
        o.announced = true;  // matched: no later chunk is its
        o.notified = o.total;
        if (total > bytes) rejected.push_back({o.peer, o.tag, total, total - bytes});
        return;
      }
      o.announced = true;
      o.notified += bytes;
      if (bytes == 0) return;
      chunk c{slot, buffer, offset, bytes, {}};
      runtime.copy(o.data + offset, from, bytes);
      c.done = runtime.mark();
      o.copying.push_back(c);
    }

    void progress_send(device_op& o) {
      peer_state& peer = peers[std::size_t(o.peer)];
      if (o.total == 0 && !o.announced && !earlier_send_unfinished(o, true)) {
        o.announced = true;
        post_notice(o.peer, {notice::chunk_ready, no_slot, o.tag.call, o.tag.step, 0, 0, 0}, &o.unsent_notices, false);
      }
      while (o.dispatched < o.total && !earlier_send_unfinished(o)) {
        const auto free = std::find(peer.slot_free.begin(), peer.slot_free.end(), true);
        if (free == peer.slot_free.end()) break;
        const auto slot = static_cast<std::uint32_t>(free - peer.slot_free.begin());
        peer.slot_free[slot] = false;
        const std::size_t bytes = std::min(options.slot_bytes, o.total - o.dispatched);
        chunk c{slot, nullptr, o.dispatched, bytes, {}};
        runtime.copy(peer.inbox_for_me + std::size_t(slot) * options.slot_bytes, o.data + o.dispatched, bytes);
        c.done = runtime.mark();
        o.copying.push_back(c);
        o.dispatched += bytes;
        o.announced = true;
      }
      std::erase_if(o.copying, [&](chunk& c) {
        if (!runtime.reached(c.done)) return false;
        post_notice(o.peer, {notice::chunk_ready, c.slot, o.tag.call, o.tag.step, c.offset, c.bytes, o.total}, &o.unsent_notices, false);
        release(c);
        return true;
      });
    }

    void progress_recv(device_op& o) {
      std::erase_if(o.copying, [&](chunk& c) {
        if (!runtime.reached(c.done)) return false;
        if (c.slot != no_slot && c.buffer == nullptr) post_notice(o.peer, {notice::slot_free, c.slot}, &o.unsent_notices, true);
        o.arrived += c.bytes;
        release(c);
        return true;
      });
    }

    // Early chunks: free the slot once the copy out of it is done, then wait for the receive.
    void progress_early() {
      for (auto& e : early)
        if (!e.held && runtime.reached(e.copy.done)) {
          e.held = true;
          runtime.forget(e.copy.done);
          if (e.copy.slot != no_slot) post_notice(e.peer, {notice::slot_free, e.copy.slot}, nullptr, true);
          e.copy.slot = no_slot;
        }
      deliver_held();
    }

    // In arrival order: a peer's chunks wait behind its first one still being copied.
    // A chunk leaves the list before it is handed over: the receive owns its buffer then.
    void deliver_held() {
      std::vector<bool> stalled(std::size_t(size()), false);
      for (std::size_t i = 0; i < early.size();) {
        const early_chunk e = early[i];
        device_op* o = nullptr;
        if (stalled[std::size_t(e.peer)] || !e.held) {
          stalled[std::size_t(e.peer)] = true;
        } else if (drop_rejected(e.peer, e.tag, e.total, e.bytes)) {
          early.erase(early.begin() + std::ptrdiff_t(i));
          if (e.copy.buffer) runtime.free(e.copy.buffer);
          continue;
        } else {
          o = posted_recv(e.peer, e.tag);
        }
        if (o == nullptr) {
          ++i;
          continue;
        }
        early.erase(early.begin() + std::ptrdiff_t(i));
        take_chunk(*o, static_cast<const std::byte*>(e.copy.buffer), no_slot, e.copy.buffer, e.offset, e.bytes, e.total);
      }
    }

    void post_notice(int peer, notice body, int* unsent, bool is_credit) {
      peer_state& p = peers[std::size_t(peer)];
      auto& o = outgoing.emplace_back(outgoing_notice{body, {}, unsent, is_credit});
      o.req = host.post_send(peer, device_ipc_detail::notice_tag(p.notices_sent++), std::as_bytes(std::span{&o.body, 1}));
      if (unsent) ++*unsent;
    }

    // A credit for a peer that has since closed its communicator is dropped: it sends nothing more.
    void flush_notices() {
      std::erase_if(outgoing, [&](outgoing_notice& o) {
        bool sent = false;
        try {
          sent = host.test(o.req);
        } catch (const error& e) {
          if (!o.is_credit || e.code() != errc::peer_lost) throw;
          sent = true;
        }
        if (sent && o.unsent) --*o.unsent;
        return sent;
      });
    }
  };

  std::unique_ptr<state> state_;
};

}  // namespace collectives
