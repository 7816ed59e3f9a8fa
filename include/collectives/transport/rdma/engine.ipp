// The rdma engine's member functions (engine.hpp): inline in header-only use, compiled
// once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "engine.hpp"

namespace collectives::rdma_detail {

// A failed transfer whose error says the peer is gone, rather than the link confused.
inline bool means_gone(int err) {
  switch (err) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ETIMEDOUT:
    case FI_EIO:
    case FI_ESHUTDOWN:
      return true;
    default:
      return false;
  }
}

inline std::string completion_error(fid_cq* cq, const fi_cq_err_entry& e) {
  std::string s = fi_strerror(e.err);
  char detail[256] = {};
  if (const char* p = fi_cq_strerror(cq, e.prov_errno, e.err_data, detail, sizeof detail); p && *p && std::string_view(p) != s)
    s += ": " + std::string(p);
  return s;
}

engine::engine(int rank, int size, info_ptr provider, engine_limits limits)
    : match_(rank, size, {limits.eager_bytes, limits.early_bytes_per_peer}),
      limits_(limits),
      ep_(std::make_unique<endpoint>(std::move(provider))),
      cache_(std::make_unique<registration_cache>(*ep_, limits.cached_registrations)),
      peers_(std::size_t(size)) {
  limits_.read_bytes = std::min(limits_.read_bytes, ep_->max_message());
  limits_.slice_bytes = std::min(limits_.slice_bytes, limits_.read_bytes);
  limits_.reads_in_flight = std::max<std::size_t>(limits_.reads_in_flight, 1);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  receives_.each = sends_.each = header_size + limits_.eager_bytes;
  if (size > 1) {
    grow(receives_, limits_.receive_buffers, FI_RECV);
    grow(sends_, 16, FI_SEND);
  }
}

engine::~engine() {
  say_goodbye();
  if (ranks_here_ > 1) park_until_group_closed();
  if (ep_) ep_->shut();  // before the buffers posted to it go
  for (auto& p : peers_)
    if (p.pidfd >= 0) ::close(p.pidfd);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void engine::connect(const std::vector<std::string>& addresses, const std::vector<peer_place>& places,
                     const std::string& this_place) {
  const auto handles = ep_->insert(addresses);
  for (const auto& a : addresses) group_ += a;
  ranks_here_ = int(std::count_if(places.begin(), places.end(),
                                  [&](const peer_place& at) { return at.host == this_place && at.pid == ::getpid(); }));
  const auto now = clock::now();
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    peer_state& p = peers_[r];
    p.addr = handles[r];
    p.in.slices.resize(limits_.reads_in_flight);
    p.heard = p.probed = now;
    const peer_place& at = places[r];
    if (int(r) != rank() && at.host == this_place && at.pid > 0 && at.pid != ::getpid())
      p.pidfd = int(::syscall(SYS_pidfd_open, pid_t(at.pid), 0));  // -1 where the kernel has none: probes serve
  }
  for (std::uint32_t i = 0; i < receives_.at.size(); ++i) post_receive(i);
}

void engine::park_until_group_closed() {
  static std::mutex lock;
  struct group_here {
    int closed = 0;
    std::vector<parked> endpoints;
  };
  static std::map<std::string, group_here> groups;
  // What else was registered closes now, while its domain is open.
  cache_.reset();
  sends_ = {};
  for (auto& p : peers_) p.in.bounce_reg = registration();
  std::vector<parked> closing;  // closed outside the lock
  {
    std::lock_guard hold(lock);
    group_here& g = groups[group_];
    g.endpoints.emplace_back(std::move(ep_), std::move(receives_));
    if (++g.closed < ranks_here_) return;
    closing = std::move(g.endpoints);
    groups.erase(group_);
  }
}

// ---- buffers and sending ------------------------------------------------------------

void engine::grow(buffer_pool& pool, std::size_t count, std::uint64_t access) {
  const std::size_t first = pool.at.size();
  auto block = std::make_unique<std::byte[]>(count * pool.each);
  const std::uint64_t key = (ep_->mr_mode() & FI_MR_PROV_KEY) ? 0 : next_requested_key();
  pool.regs.emplace_back(*ep_, block.get(), count * pool.each, access, key);
  const work what = &pool == &receives_ ? work::receive : work::send;
  for (std::size_t i = 0; i < count; ++i) {
    const auto index = std::uint32_t(first + i);
    pool.at.push_back(block.get() + i * pool.each);
    pool.desc.push_back(pool.regs.back().desc());
    pool.contexts.push_back({{}, what, -1, index});
    pool.free.push_back(index);
  }
  pool.blocks.push_back(std::move(block));
}

std::uint32_t engine::take_send_buffer() {
  if (sends_.free.empty()) grow(sends_, sends_.at.size(), FI_SEND);
  const std::uint32_t i = sends_.free.back();
  sends_.free.pop_back();
  return i;
}

void engine::send(int peer, std::uint32_t index, std::size_t length) {
  auto& waiting_for_room = peers_[std::size_t(peer)].backlog;
  if (!waiting_for_room.empty() || !post_one_send(peer, index, length)) waiting_for_room.push_back({index, length});
}

bool engine::post_one_send(int peer, std::uint32_t index, std::size_t length) {
  if (!ep_open_) {
    sends_.free.push_back(index);
    return true;
  }
  context& c = sends_.contexts[index];
  c.peer = peer;
  const fi_addr_t to = peers_[std::size_t(peer)].addr;
  // A message the provider takes in at once costs no completion. A probe needs its own,
  // and so does a rank that leaves: it waits for its last messages to be out.
  if (length <= ep_->inject_bytes() && peers_[std::size_t(peer)].probe != index && !leaving_) {
    const ssize_t rc = fi_tinject(ep_->ep(), sends_.at[index], length, to, std::uint64_t(rank()));
    if (rc == -FI_EAGAIN) return false;
    sends_.free.push_back(index);
    if (rc != 0) lost(peer, "lost rank " + std::to_string(peer) + ": a send to it failed (" + fi_strerror(int(-rc)) + ")");
    return true;
  }
  const ssize_t rc = fi_tsend(ep_->ep(), sends_.at[index], length, sends_.desc[index], to, std::uint64_t(rank()), &c.fi);
  if (rc == -FI_EAGAIN) return false;
  if (rc != 0) {
    sends_.free.push_back(index);
    lost(peer, "lost rank " + std::to_string(peer) + ": a send to it failed (" + fi_strerror(int(-rc)) + ")");
    return true;
  }
  ++sends_in_flight_;
  return true;
}

std::uint32_t engine::send_control(int peer, header h, std::string_view text) {
  const std::uint32_t i = take_send_buffer();
  text = text.substr(0, limits_.eager_bytes);
  write_header(sends_.at[i], h);
  if (!text.empty()) std::memcpy(sends_.at[i] + header_size, text.data(), text.size());
  send(peer, i, header_size + text.size());
  return i;
}

void engine::post_receive(std::uint32_t index) {
  if (!ep_open_) return;
  const ssize_t rc = fi_trecv(ep_->ep(), receives_.at[index], receives_.each, receives_.desc[index], FI_ADDR_UNSPEC, 0,
                              ~std::uint64_t(0), &receives_.contexts[index].fi);
  if (rc == -FI_EAGAIN) return unposted_receives_.push_back(index);
  if (rc != 0) shut_endpoint(std::string("posting a receive failed (") + fi_strerror(int(-rc)) + ")");
}

std::uint32_t engine::post_send(int peer, message_tag tag, std::span<const std::byte> data) {
  const std::uint32_t slot = match_.post_send(peer, tag, data);
  auto& o = match_.at(slot);
  o.wire = {};
  if (!open(peer) || !ep_open_) return slot;  // finish() tells why
  header h;
  h.step = tag.step;
  h.call = tag.call;
  h.bytes = data.size();
  const std::size_t first = std::min(data.size(), limits_.eager_bytes);
  if (data.size() > limits_.eager_bytes) {
    try {
      o.wire.lease = cache_->acquire(data.data(), data.size());
    } catch (...) {
      std::uint32_t given_up = slot;
      match_.cancel(given_up);
      throw;
    }
    h.what = kind::announce;
    h.addr = o.wire.lease->remote_address(data.data());
    h.key = o.wire.lease->key();
    o.state = op_state::moving;
  } else {
    o.state = op_state::done;  // its bytes are copied below: the caller's buffer is free
  }
  h.id = o.wire.id = next_id_++;
  if (h.what == kind::announce) announced_[h.id] = slot;
  const std::uint32_t i = take_send_buffer();
  write_header(sends_.at[i], h);
  if (first != 0) std::memcpy(sends_.at[i] + header_size, data.data(), first);
  send_in_order(peer, i, header_size + first, h.id);
  return slot;
}

void engine::send_in_order(int peer, std::uint32_t index, std::size_t length, std::uint64_t id) {
  peers_[std::size_t(peer)].queue.push_back({index, length, id, false});
  send_queued(peer);
}

void engine::send_queued(int peer) {
  peer_state& p = peers_[std::size_t(peer)];
  while (!p.queue.empty() && p.announcing == 0) {
    const queued m = p.queue.front();
    p.queue.pop_front();
    if (m.withdrawn) {
      sends_.free.push_back(m.index);
      continue;
    }
    // Numbered as it leaves, so that a message withdrawn while queued leaves no gap.
    header h = read_header(sends_.at[m.index]);
    h.seq = p.sent_seq++;
    write_header(sends_.at[m.index], h);
    if (h.what == kind::announce) ++p.announcing;
    send(peer, m.index, m.length);
  }
}

std::uint32_t engine::post_recv(int peer, message_tag tag, std::span<std::byte> into) {
  const std::uint32_t slot = match_.post_recv(peer, tag, into);
  match_.at(slot).wire = {};
  take_waiting(peer);
  return slot;
}

std::uint32_t engine::post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
  const std::uint32_t slot = match_.post_recv_reduce(peer, tag, bytes, granule, sink);
  match_.at(slot).wire = {};
  take_waiting(peer);
  return slot;
}

// ---- progress -----------------------------------------------------------------------

bool engine::progress() {
  bool any = false;
  if (abort_to_tell_.exchange(false)) {
    tell_abort();
    any = true;
  }
  if (!ep_open_) return any;
  // Everything completed so far, news first: a withdrawal is seen before the
  // announcement it withdraws is read, when both are in, and before the failures: a
  // read fails once the sender has revoked its key, and the withdrawal that says why
  // came in before that failure (the queue hands failures out ahead of the rest).
  batch_.clear();
  failures_.clear();
  for (;;) {
    fi_cq_tagged_entry done[32];
    const ssize_t n = fi_cq_read(ep_->cq(), done, 32);
    if (n > 0) {
      batch_.insert(batch_.end(), done, done + n);
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry e{};
      if (fi_cq_readerr(ep_->cq(), &e, 0) > 0) failures_.emplace_back(e, completion_error(ep_->cq(), e));
      any = true;
      continue;
    }
    break;  // -FI_EAGAIN: nothing more now
  }
  any = any || !batch_.empty();
  for (const auto& e : batch_)
    if (ep_open_ && is_news(e)) completed(e);
  for (const auto& [e, why] : failures_)
    if (ep_open_) failed(e, why);
  for (const auto& e : batch_)
    if (ep_open_ && !is_news(e)) completed(e);
  if (!ep_open_) return true;
  // Per peer: a provider can refuse sends to one peer for good (rxm reconnecting to a
  // rank that left), which must hold up no other.
  for (int p = 0; p < size(); ++p) {
    auto& waiting_for_room = peers_[std::size_t(p)].backlog;
    while (!waiting_for_room.empty() && post_one_send(p, waiting_for_room.front().index, waiting_for_room.front().length))
      waiting_for_room.pop_front();
  }
  for (auto pending = std::exchange(unposted_receives_, {}); std::uint32_t i : pending) post_receive(i);
  for (int p = 0; p < size(); ++p)
    if (peers_[std::size_t(p)].in.active) read_more(p);
  return any;
}

bool engine::is_news(const fi_cq_tagged_entry& e) const {
  const auto* c = static_cast<const context*>(e.op_context);
  return c->what == work::receive && e.len >= header_size && !is_ordered(read_header(receives_.at[c->index]).what);
}

void engine::completed(const fi_cq_tagged_entry& e) {
  auto* c = static_cast<context*>(e.op_context);
  switch (c->what) {
    case work::receive: {
      const auto from = std::int64_t(e.tag);
      if (from >= 0 && from < size() && from != rank()) arrived(int(from), {receives_.at[c->index], e.len});
      post_receive(c->index);
      break;
    }
    case work::send:
      --sends_in_flight_;
      sends_.free.push_back(c->index);
      if (c->peer >= 0 && peers_[std::size_t(c->peer)].probe == c->index) peers_[std::size_t(c->peer)].probe = no_probe;
      break;
    case work::read:
      slice_read(c->peer, c->index);
      break;
  }
}

void engine::failed(const fi_cq_err_entry& e, const std::string& why) {
  auto* c = static_cast<context*>(e.op_context);
  if (c == nullptr) return;
  switch (c->what) {
    case work::receive:
      if (e.err != FI_ECANCELED) {
        log::debug(match_.who() + "a receive failed (" + why + ")");
        post_receive(c->index);
      }
      break;
    case work::send:
      --sends_in_flight_;
      sends_.free.push_back(c->index);
      if (c->peer >= 0) lost(c->peer, "lost rank " + std::to_string(c->peer) + ": a send to it failed (" + why + ")");
      break;
    case work::read: {
      reading& r = peers_[std::size_t(c->peer)].in;
      r.slices[c->index].busy = false;
      --r.in_flight;
      // tcp;ofi_rxm cancels the reads of a connection that went down, the socket's
      // errno in prov_errno. A revoked key reads as cancelled too, with ENOENT, and so
      // at times does a read from a process being killed: on this host its pidfd tells
      // which (its sockets close a moment before the pidfd says it ended). Only the
      // first failed slice decides: the link is no longer open for the others.
      if (open(c->peer)) {
        const bool gone = means_gone(e.err) || (e.err == FI_ECANCELED && (means_gone(e.prov_errno) ||
                                                                          process_ended(c->peer, std::chrono::milliseconds(100))));
        if (gone) lost(c->peer, "lost rank " + std::to_string(c->peer) + ": reading its message failed (" + why + ")");
        else match_.break_link(c->peer, "reading rank " + std::to_string(c->peer) + "'s message failed (" + why + ")");
      }
      r.abandoned = true;
      if (r.in_flight == 0) finish_reading(c->peer, outcome::dropped);
      break;
    }
  }
}

void engine::arrived(int peer, std::span<const std::byte> message) {
  peer_state& p = peers_[std::size_t(peer)];
  p.heard = clock::now();
  if (message.size() < header_size) {
    match_.break_link(peer, "rank " + std::to_string(peer) + " sent a message shorter than its header");
    return;
  }
  const header h = read_header(message.data());
  if (!is_ordered(h.what)) return take_news(peer, h, message.subspan(header_size));
  if (!open(peer)) return;  // nothing more is taken from a link that is down
  if (h.what == kind::goodbye) {
    // Whatever its process does now is no loss; it waits for word that this came.
    p.said_goodbye = true;
    header seen;
    seen.what = kind::goodbye_seen;
    send_control(peer, seen);
  }
  if (h.seq == p.next_seq && p.waiting.empty() && !p.in.active && take(peer, h, message.subspan(header_size))) {
    ++p.next_seq;
    return;
  }
  // Out of order, or held: kept, in order, until its turn. A goodbye among them means
  // the peer's end is no loss, whatever its process does meanwhile.
  auto at = p.waiting.end();
  while (at != p.waiting.begin() && std::prev(at)->seq > h.seq) --at;
  p.waiting.insert(at, {h.seq, std::vector<std::byte>(message.begin(), message.end())});
  take_waiting(peer);
}

void engine::take_waiting(int peer) {
  peer_state& p = peers_[std::size_t(peer)];
  // An announcement taken here may end its reading at once (its receive is gone), and
  // the end of a reading takes the next message: this loop does, not a call within it,
  // which would take the message at the front, not yet counted, a second time.
  if (p.taking_waiting) return;
  p.taking_waiting = true;
  struct taken {
    bool& flag;
    ~taken() { flag = false; }
  } done{p.taking_waiting};
  while (!p.waiting.empty() && !p.in.active && p.waiting.front().seq == p.next_seq && open(peer)) {
    const auto message = std::span<const std::byte>(p.waiting.front().bytes);
    if (!take(peer, read_header(message.data()), message.subspan(header_size))) return;
    ++p.next_seq;
    p.waiting.pop_front();
  }
}

bool engine::take(int peer, const header& h, std::span<const std::byte> payload) {
  const message_tag tag{h.call, h.step};
  switch (h.what) {
    case kind::eager:
      if (payload.size() != h.bytes) break;
      if (match_.begin_message(peer, tag, h.bytes) == landing::held) return false;
      if (h.bytes != 0) match_.deliver(peer, payload);
      return true;
    case kind::announce:
      if (payload.size() >= h.bytes) break;
      if (match_.begin_message(peer, tag, h.bytes) == landing::held) return false;
      start_reading(peer, h, payload);
      return true;
    case kind::goodbye:
      match_.depart(peer, "rank " + std::to_string(peer) + " closed its communicator");
      return true;
    default:
      break;
  }
  match_.break_link(peer, "rank " + std::to_string(peer) + " sent a malformed message");
  return true;
}

void engine::take_news(int peer, const header& h, std::span<const std::byte> payload) {
  switch (h.what) {
    case kind::done:
      return answered(peer, h);
    case kind::withdraw: {
      // Its memory is no longer to be read: the message is dropped, this link is out of
      // step, and the sender learns (`done`) once no read of it is under way here.
      // Given up after a failure, which it names: that failure comes first, and the peer
      // counts as lost (as over shm, and as it will be once it leaves).
      const bool after_failure = h.bytes < std::uint64_t(size());
      if (after_failure)
        match_.hear(peer, {int(h.bytes), h.flag != 0, std::string(reinterpret_cast<const char*>(payload.data()), payload.size())});
      reading& r = peers_[std::size_t(peer)].in;
      const bool reading_it = r.active && r.from.id == h.id;
      if (!reading_it) answer(peer, h.id, outcome::dropped);  // while the link is open
      if (after_failure)
        lost(peer, "rank " + std::to_string(peer) + " gave up halfway through a message to this rank after a failure");
      else
        match_.break_link(peer, "the link with rank " + std::to_string(peer) +
                                    " is out of step: it gave up a message halfway after an earlier failure; "
                                    "build a new communicator");
      if (!reading_it) return;
      r.abandoned = true;
      if (r.in_flight == 0) finish_reading(peer, outcome::dropped);
      return;
    }
    case kind::abort:
      return match_.note_abort(h.bytes < std::uint64_t(size()) ? int(h.bytes) : peer);
    case kind::failure:
      match_.hear(peer, {h.bytes < std::uint64_t(size()) ? int(h.bytes) : -1, h.flag != 0,
                         std::string(reinterpret_cast<const char*>(payload.data()), payload.size())});
      return tell_first_failure();
    case kind::probe:
      return;
    case kind::goodbye_seen:
      peers_[std::size_t(peer)].saw_goodbye = true;
      return;
    default:
      return match_.break_link(peer, "rank " + std::to_string(peer) + " sent a malformed message");
  }
}

// ---- announced messages -------------------------------------------------------------

void engine::start_reading(int peer, const header& h, std::span<const std::byte> first) {
  reading& r = peers_[std::size_t(peer)].in;
  r.active = true;
  r.abandoned = false;
  r.from = h;
  r.slot = match_.receiving(peer);
  r.issued = r.landed = first.size();
  r.in_flight = 0;
  if (r.slot == no_slot) return finish_reading(peer, outcome::dropped);  // refused for its size, or the group aborted
  r.fused = match_.at(r.slot).type == op_type::recv_reduce;
  match_.deliver(peer, first);
  if (match_.receiving(peer) == no_slot) {  // the user's op threw on the first bytes
    r.abandoned = true;
    return finish_reading(peer, outcome::dropped);
  }
  try {
    if (r.fused && !r.bounce) {
      r.bounce = std::make_unique<std::byte[]>(r.slices.size() * limits_.slice_bytes);
      r.bounce_reg = registration(*ep_, r.bounce.get(), r.slices.size() * limits_.slice_bytes, FI_READ,
                                  (ep_->mr_mode() & FI_MR_PROV_KEY) ? 0 : next_requested_key());
    }
    if (!r.fused) r.into = cache_->acquire(match_.at(r.slot).in.data(), h.bytes);
  } catch (const std::exception& e) {
    match_.break_link(peer, std::string("registering memory to read rank ") + std::to_string(peer) + "'s message failed: " + e.what());
    r.abandoned = true;
    return finish_reading(peer, outcome::dropped);
  }
  read_more(peer);
}

void engine::read_more(int peer) {
  reading& r = peers_[std::size_t(peer)].in;
  if (!r.active || r.abandoned || !ep_open_ || !open(peer)) return;
  const std::size_t total = r.from.bytes;
  for (std::uint32_t s = 0; s < r.slices.size() && r.issued < total; ++s) {
    auto& slice = r.slices[s];
    if (slice.busy) continue;
    const std::size_t length = std::min(total - r.issued, r.fused ? limits_.slice_bytes : limits_.read_bytes);
    std::byte* into = r.fused ? r.bounce.get() + s * limits_.slice_bytes : match_.at(r.slot).in.data() + r.issued;
    void* desc = r.fused ? r.bounce_reg.desc() : r.into->desc();
    slice.ctx.what = work::read;
    slice.ctx.peer = peer;
    slice.ctx.index = s;
    const ssize_t rc = fi_read(ep_->ep(), into, length, desc, peers_[std::size_t(peer)].addr, r.from.addr + r.issued,
                               r.from.key, &slice.ctx.fi);
    if (rc == -FI_EAGAIN) return;  // progress() comes back to it
    if (rc != 0) {
      match_.break_link(peer, "reading rank " + std::to_string(peer) + "'s message failed (" + fi_strerror(int(-rc)) + ")");
      r.abandoned = true;
      if (r.in_flight == 0) finish_reading(peer, outcome::dropped);
      return;
    }
    slice.busy = true;
    slice.arrived = false;
    slice.offset = r.issued;
    slice.length = length;
    r.issued += length;
    ++r.in_flight;
  }
}

void engine::slice_read(int peer, std::uint32_t which) {
  reading& r = peers_[std::size_t(peer)].in;
  --r.in_flight;
  r.slices[which].arrived = true;
  if (r.abandoned) {
    r.slices[which].busy = false;
    if (r.in_flight == 0) finish_reading(peer, outcome::dropped);
    return;
  }
  if (!r.fused) {
    r.slices[which].busy = false;
    r.landed += r.slices[which].length;
    match_.delivered_directly(peer, r.slices[which].length);
  } else {
    // Reduced in the message's order, whichever slice came first.
    for (bool more = true; more;) {
      more = false;
      for (std::uint32_t s = 0; s < r.slices.size(); ++s) {
        auto& slice = r.slices[s];
        if (!slice.busy || !slice.arrived || slice.offset != r.landed) continue;
        match_.deliver(peer, {r.bounce.get() + s * limits_.slice_bytes, slice.length});
        r.landed += slice.length;
        slice.busy = false;
        more = true;
      }
    }
    if (match_.receiving(peer) == no_slot && r.landed < r.from.bytes) {  // the user's op threw
      r.abandoned = true;
      if (r.in_flight == 0) finish_reading(peer, outcome::dropped);
      return;
    }
  }
  if (r.landed == r.from.bytes) return finish_reading(peer, outcome::read);
  read_more(peer);
}

void engine::finish_reading(int peer, outcome how) {
  peer_state& p = peers_[std::size_t(peer)];
  reading& r = p.in;
  if (!r.active) return;
  r.active = false;
  // A message not delivered whole ends here for the matching engine, unless its receive
  // still waits on it (a link that failed under it: the receive then fails with the link).
  if (match_.in_message(peer) && match_.receiving(peer) == no_slot)
    match_.delivered_directly(peer, r.from.bytes - match_.message_moved(peer));
  cache_->give_back(r.into);
  r.slot = no_slot;
  answer(peer, r.from.id, how);
  take_waiting(peer);
}

void engine::answer(int peer, std::uint64_t id, outcome how) {
  if (!ep_open_ || match_.link(peer) == link_state::lost) return;
  header d;
  d.what = kind::done;
  d.flag = std::uint8_t(how);
  d.id = id;
  try {
    send_control(peer, d);
  } catch (...) {  // no memory for a send buffer: the sender's send waits until its deadline
  }
}

void engine::answered(int peer, const header& h) {
  if (withdrawn_.erase(h.id) != 0) return;  // a withdrawal's answer: no read of it is under way
  const auto it = announced_.find(h.id);
  if (it == announced_.end()) return;  // a withdrawn send's
  auto& o = match_.at(it->second);
  announced_.erase(it);
  if (o.peer != peer) return;
  cache_->give_back(o.wire.lease);
  --peers_[std::size_t(peer)].announcing;
  send_queued(peer);
  // Read, or dropped by its receiver (a receive that failed or was cancelled): as over
  // tcp, the send is done either way; the receiver's side tells the story.
  o.state = op_state::done;
}

void engine::cancel(std::uint32_t& slot) noexcept {
  if (slot == no_slot) return;
  auto& o = match_.at(slot);
  const int peer = o.peer;
  auto& waiting_to_go = peers_[std::size_t(peer)].queue;
  const auto queued_here = std::find_if(waiting_to_go.begin(), waiting_to_go.end(),
                                        [&](const queued& m) { return o.type == op_type::send && m.id == o.wire.id; });
  if (queued_here != waiting_to_go.end()) {
    // Not sent yet: it never will be.
    queued_here->withdrawn = true;
    announced_.erase(o.wire.id);
    cache_->give_back(o.wire.lease);
  } else if (o.type == op_type::send && o.state == op_state::moving && announced_.erase(o.wire.id) != 0) {
    // The peer may be reading it: the withdrawal goes first, with the reason, and the
    // memory stays readable until the peer says no read of it is under way (or
    // withdraw_wait passes), so that its reads do not fail on a revoked key before it
    // has heard why (it then reports a broken link instead of the failure).
    --peers_[std::size_t(peer)].announcing;
    const std::uint64_t id = o.wire.id;
    if (ep_open_ && open(peer)) {
      header w;
      w.what = kind::withdraw;
      w.id = id;
      w.bytes = std::uint64_t(size());  // no failure to name
      try {
        // Why, so that the reader names the failure rather than this rank.
        std::string why;
        if (const auto f = match_.reason_to_leave()) {
          w.bytes = std::uint64_t(f->rank);
          w.flag = f->gone ? 1 : 0;
          why = f->why;
        }
        send_control(peer, w, why);
        withdrawn_.insert(id);
      } catch (...) {  // no memory for a send buffer: the peer's read fails instead
      }
    }
    match_.break_link(peer, "the link with rank " + std::to_string(peer) +
                                " is out of step: a message to it was cancelled halfway after an earlier failure; "
                                "build a new communicator");
    // A provider that reads by address (shm) does not check a closed registration
    // either: the wait also keeps such reads off memory the caller takes back. A peer
    // that says nothing meanwhile is not reading, and takes the withdrawal before it would.
    const auto until = clock::now() + limits_.withdraw_wait;
    try {
      while (withdrawn_.count(id) != 0 && ep_open_ && match_.link(peer) != link_state::lost && clock::now() < until)
        if (!progress()) std::this_thread::yield();
    } catch (...) {
    }
    withdrawn_.erase(id);
    cache_->revoke(o.wire.lease);
  } else {
    cache_->give_back(o.wire.lease);
  }
  const cancellation c = match_.cancel(slot);
  if (!c.mid_message) return;
  // A receive cancelled while its message was being read. Reads into the caller's
  // buffer can't be called back: wait for them, or give the endpoint up.
  reading& r = peers_[std::size_t(c.peer)].in;
  if (!r.active) return;
  r.abandoned = true;
  if (!r.fused) {
    const auto until = clock::now() + limits_.cancel_limit;
    try {
      while (r.in_flight > 0 && ep_open_ && clock::now() < until)
        if (!progress()) std::this_thread::yield();
    } catch (...) {
    }
    if (r.in_flight > 0)
      shut_endpoint("rank " + std::to_string(c.peer) + " did not finish serving a cancelled receive's reads within " +
                    std::to_string(limits_.cancel_limit.count()) +
                    " ms: this rank closed its endpoint to take the buffer back; build a new communicator");
  }
  match_.break_link(c.peer, "the link with rank " + std::to_string(c.peer) +
                                " is out of step: a message from it was cancelled halfway after an earlier failure; "
                                "build a new communicator");
  if (r.in_flight == 0 || !ep_open_) finish_reading(c.peer, outcome::dropped);
}

// ---- waiting and health -------------------------------------------------------------

bool engine::wait_for_activity(deadline until) {
  if (progress() || match_.broken()) return true;
  const auto poll_until = std::min(until, clock::now() + limits_.poll_time);
  while (clock::now() < poll_until) {
    std::this_thread::yield();
    if (progress()) return true;
  }
  watch_peers();
  if (match_.broken()) return true;
  const auto wake = std::min(until, clock::now() + limits_.probe_after);
  fid* cq = ep_open_ ? &ep_->cq()->fid : nullptr;
  if (cq && ep_->wait_fd() >= 0 && fi_trywait(ep_->fabric(), &cq, 1) == FI_SUCCESS) {
    std::vector<pollfd> fds{{ep_->wait_fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    for (int p = 0; p < size(); ++p)
      if (peers_[std::size_t(p)].pidfd >= 0 && open(p) && !peers_[std::size_t(p)].said_goodbye)
        fds.push_back({peers_[std::size_t(p)].pidfd, POLLIN, 0});
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - clock::now());
    timespec ts{time_t(std::max<long long>(left.count(), 0) / 1'000'000'000), long(std::max<long long>(left.count(), 0) % 1'000'000'000)};
    ::ppoll(fds.data(), fds.size(), &ts, nullptr);
    std::uint64_t drained;
    if (fds[1].revents & POLLIN) [[maybe_unused]] auto n = ::read(wake_fd_, &drained, sizeof drained);
  } else {
    // No descriptor to sleep on (or the provider has work in hand): poll, the core yielded.
    while (clock::now() < wake && !progress() && !abort_to_tell_) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const bool any = progress();
  watch_peers();
  return any || match_.broken() || clock::now() < until;  // a wake to watch the peers counts as a spurious one
}

void engine::watch_peers() {
  const auto now = clock::now();
  if (now - last_watch_ < limits_.poll_time) return;
  last_watch_ = now;
  for (int r = 0; r < size(); ++r) {
    peer_state& p = peers_[std::size_t(r)];
    if (r == rank() || !open(r) || !ep_open_ || p.said_goodbye) continue;
    if (p.pidfd >= 0) {
      if (!process_ended(r, std::chrono::milliseconds(0))) continue;
      // Its process ended: what it said before it did (a goodbye) may still be on its way.
      for (const auto until = clock::now() + std::chrono::milliseconds(20); open(r) && clock::now() < until;) progress();
      if (open(r))
        lost(r, "lost rank " + std::to_string(r) + ": its process ended without saying goodbye (did it exit or crash?)");
    } else if (p.probe != no_probe && now - p.probed > limits_.probe_limit) {
      // A peer alive takes a message into its host's buffers whether or not its
      // program is busy; a provider can keep one for a vanished peer pending for good.
      lost(r, "lost rank " + std::to_string(r) + ": a message to it was not delivered within " +
                  std::to_string(limits_.probe_limit.count()) + " ms (did it exit or crash, or its host go down?)");
    } else if (p.probe == no_probe && now - p.heard > limits_.probe_after && now - p.probed > limits_.probe_after) {
      p.probed = now;
      header probe;
      probe.what = kind::probe;
      p.probe = take_send_buffer();  // before it goes: a probe is never injected
      write_header(sends_.at[p.probe], probe);
      send(r, p.probe, header_size);
    }
  }
}

bool engine::process_ended(int peer, std::chrono::milliseconds within) const {
  const int fd = peers_[std::size_t(peer)].pidfd;
  if (fd < 0) return false;  // another host's, or a kernel without pidfds
  pollfd x{fd, POLLIN, 0};
  return ::poll(&x, 1, int(within.count())) > 0;
}

void engine::lost(int peer, std::string why) {
  if (!open(peer)) return;
  if (match_.lose(peer, std::move(why)) && match_.aborted_by() < 0) log::warn(match_.who() + match_.link_story(peer));
  tell_first_failure();
}

void engine::abort() {
  match_.note_abort(rank());
  abort_to_tell_ = true;
  const std::uint64_t one = 1;
  if (wake_fd_ >= 0) [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

void engine::tell_abort() {
  if (told_abort_ || !ep_open_) return;
  told_abort_ = true;
  header a;
  a.what = kind::abort;
  a.bytes = std::uint64_t(std::max(match_.aborted_by(), 0));
  for (int p = 0; p < size(); ++p)
    if (p != rank() && open(p)) send_control(p, a);
}

void engine::tell_first_failure() {
  if (told_first_ || !match_.first_failure()) return;
  told_first_ = true;
  tell_failure(*match_.first_failure());
}

void engine::tell_failure(const failure& f) {
  if (!ep_open_) return;
  header h;
  h.what = kind::failure;
  h.bytes = std::uint64_t(f.rank);
  h.flag = f.gone ? 1 : 0;
  for (int p = 0; p < size(); ++p) {
    peer_state& s = peers_[std::size_t(p)];
    if (p == rank() || p == f.rank || s.told_failure || match_.link(p) == link_state::lost) continue;
    s.told_failure = true;
    send_control(p, h, f.why);
  }
}

void engine::shut_endpoint(const std::string& why) {
  if (!ep_open_) return;
  ep_open_ = false;
  ep_->shut();
  log::warn(match_.who() + why);
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    match_.break_link(p, why);
    reading& r = peers_[std::size_t(p)].in;
    r.in_flight = 0;
    finish_reading(p, outcome::dropped);
  }
}

void engine::say_goodbye() noexcept {
  try {
    if (!ep_open_ || size() == 1) return;
    leaving_ = true;
    if (match_.aborted_by() >= 0) {
      abort_to_tell_ = false;
      tell_abort();
    } else if (const auto why = match_.reason_to_leave()) {
      tell_failure(*why);
    }
    for (int p = 0; p < size(); ++p)
      if (p != rank() && open(p)) {
        peers_[std::size_t(p)].announcing = 0;  // what waits behind an unread message goes now
        header g;
        g.what = kind::goodbye;
        const std::uint32_t i = take_send_buffer();
        write_header(sends_.at[i], g);
        send_in_order(p, i, header_size, 0);
      }
    // With manual progress the sends leave only while this rank reads its queue. It
    // waits (a little) for each peer to say the goodbye came: the provider's sockets
    // may close with a reset, and a reset loses what its peer had not read yet.
    auto unanswered = [&] {
      for (int p = 0; p < size(); ++p)
        if (p != rank() && open(p) && !peers_[std::size_t(p)].saw_goodbye) return true;
      return false;
    };
    const auto until = clock::now() + (match_.aborted() ? std::chrono::milliseconds(200) : std::chrono::milliseconds(2000));
    auto waiting_for_room = [&] {
      for (int p = 0; p < size(); ++p)
        if (open(p) && !peers_[std::size_t(p)].backlog.empty()) return true;
      return false;
    };
    while ((sends_in_flight_ > 0 || waiting_for_room() || unanswered()) && ep_open_ && clock::now() < until)
      if (!progress()) std::this_thread::yield();
  } catch (...) {
    // Leaving anyway; the peers find this rank gone.
  }
}

}  // namespace collectives::rdma_detail
