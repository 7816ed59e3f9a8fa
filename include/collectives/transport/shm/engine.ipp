// The shm engine's member functions (engine.hpp): inline in header-only use, compiled
// once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "engine.hpp"

namespace collectives::shm_detail {

engine::engine(int rank, segment seg, engine_limits limits)
    : seg_(std::move(seg)), match_(rank, seg_ ? seg_.shape().size : 1, limits.early), limits_(limits),
      bound_to_one_cpu_(shm_detail::bound_to_one_cpu()),
      poll_time_(!bound_to_one_cpu_ && size() > usable_cpus() ? limits.oversubscribed_poll_time : limits.poll_time),
      fifos_(std::size_t(size())) {
  try_reading_peers();
}

engine::~engine() {
  if (!seg_) return;
  note_abort();
  if (!match_.aborted())
    if (const auto why = match_.reason_to_leave()) publish(*why);  // unless one is there already
  shared(seg_.rank(rank()).state).store(departed, std::memory_order_release);
  for (int p = 0; p < size(); ++p)
    if (p != rank()) ring(seg_.bell(p));
}

std::uint32_t engine::post_send(int peer, message_tag tag, std::span<const std::byte> data) {
  const std::uint32_t slot = match_.post_send(peer, tag, data);
  fifos_[std::size_t(peer)].sends.push_back(slot);
  push(peer);
  return slot;
}

std::uint32_t engine::post_recv(int peer, message_tag tag, std::span<std::byte> into) {
  return pulled(match_.post_recv(peer, tag, into));
}

std::uint32_t engine::post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
  return pulled(match_.post_recv_reduce(peer, tag, bytes, granule, sink));
}

bool engine::test(std::uint32_t& slot) {
  op& o = match_.at(slot);
  if (o.state == op_state::posted || o.state == op_state::moving) {
    throw_if_broken();
    if (o.type == op_type::send) push(o.peer);
    else pull(o.peer);
    if (o.state == op_state::posted || o.state == op_state::moving) look_at_peer(o);
  }
  return match_.finish(slot);
}

bool engine::wait_for_activity(deadline until) {
  if (broken()) return true;
  if (!seg_) {  // alone: nothing can arrive, only an abort from another thread
    while (clock::now() < until && !broken()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return broken();
  }
  // The clock is first read after a few turns: a small message's answer usually comes
  // sooner, and a clock read is a visible part of its microsecond.
  deadline poll_until = deadline::max();
  for (unsigned turn = 0;; ++turn) {
    if (news()) return true;
    if (bound_to_one_cpu_ || turn < limits_.spin_turns) cpu_relax();
    else std::this_thread::yield();
    if (turn % 8 == 7) {
      const auto now = clock::now();
      if (poll_until == deadline::max()) poll_until = std::min(until, now + poll_time_);
      if (now >= poll_until) break;
    }
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

void engine::cancel(std::uint32_t& slot) noexcept {
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
    fifo_ends& link = fifos_[std::size_t(c.peer)];
    std::erase(link.sends, cancelled);
    std::erase_if(link.sent_by_address, [&](const auto& sent) { return sent.first == cancelled; });
  } else if (c.mid_message) {
    match_.break_link(c.peer, "this rank gave up on a message from rank " + std::to_string(c.peer) + " halfway through");
  }
}

void engine::abort() {
  if (!seg_) {
    match_.note_abort(rank());
    return;
  }
  std::int32_t none = -1;
  shared(seg_.header().aborted_by).compare_exchange_strong(none, rank());
  for (int p = 0; p < size(); ++p) ring(seg_.bell(p));
}

void engine::throw_if_broken() {
  note_abort();
  match_.throw_if_broken();
}

void engine::note_abort() {
  if (!seg_) return;
  if (const int by = shared(seg_.header().aborted_by).load(std::memory_order_relaxed); by >= 0) match_.note_abort(by);
  learn_group_failure();
}

void engine::note_own_failure(std::string_view what) {
  if (!match_.note_own_failure(what)) return;
  // Written before the call gives its transfers up, so a peer that sees them given up
  // finds why. An abort is no failure of this rank's: the group was told of it.
  note_abort();
  if (seg_ && !match_.aborted() && !match_.first_failure()) publish(*match_.own_failure());
}

void engine::publish(const failure& f) {
  segment_header& h = seg_.header();
  std::uint32_t none = 0;
  if (!shared(h.failure_state).compare_exchange_strong(none, 1)) return learn_group_failure();  // another's came first
  h.failure_rank = f.rank;
  h.failure_teller = rank();
  h.failure_gone = f.gone ? 1 : 0;
  const std::size_t n = std::min(f.why.size(), failure_text_bytes - 1);
  std::memcpy(h.failure_text, f.why.data(), n);
  h.failure_text[n] = '\0';
  shared(h.failure_state).store(2, std::memory_order_release);
  learned_failure_ = true;  // this rank's own, or one it already knew
  for (int p = 0; p < size(); ++p)
    if (p != rank()) ring(seg_.bell(p));
}

void engine::learn_group_failure() {
  if (learned_failure_ || !seg_) return;
  segment_header& h = seg_.header();
  if (shared(h.failure_state).load(std::memory_order_acquire) != 2) return;
  learned_failure_ = true;
  const std::size_t n = ::strnlen(h.failure_text, failure_text_bytes);
  const int teller = h.failure_teller;
  if (teller >= 0 && teller < size()) match_.hear(teller, {h.failure_rank, h.failure_gone == 1, std::string(h.failure_text, n)});
}

bool engine::broken() {
  note_abort();
  return match_.broken();
}

std::uint32_t engine::pulled(std::uint32_t slot) {
  const op& o = match_.at(slot);
  if (o.state == op_state::posted) pull(o.peer);
  return slot;
}

void engine::push(int peer) {
  fifo_ends& link = fifos_[std::size_t(peer)];
  if (match_.link(peer) == link_state::broken) return;
  const std::size_t capacity = seg_.shape().slot_bytes, slots = seg_.shape().slots;
  bool pushed = false;
  if (!link.sent_by_address.empty()) {
    link.known_tail = shared(seg_.control(rank(), peer).tail).load(std::memory_order_acquire);
    for (; !link.sent_by_address.empty() && link.sent_by_address.front().second <= link.known_tail; link.sent_by_address.pop_front()) {
      op& read = match_.at(link.sent_by_address.front().first);
      take_over(std::uint64_t(reinterpret_cast<std::uintptr_t>(read.out.data())));  // the peer is done with it
      read.moved = read.bytes;
      read.state = op_state::done;
    }
  }
  while (!link.sends.empty()) {
    op& o = match_.at(link.sends.front());
    if (link.head - link.known_tail == slots) {
      link.known_tail = shared(seg_.control(rank(), peer).tail).load(std::memory_order_acquire);
      if (link.head - link.known_tail == slots) break;
    }
    slot_header& s = seg_.slot(rank(), peer, link.head % slots);
    const bool by_address = goes_by_address(peer, o);
    const std::size_t n = by_address ? 0 : std::min(capacity, o.bytes - o.moved);
    s.call = o.tag.call;
    s.step = o.tag.step;
    s.fragment_bytes = std::uint32_t(n);
    s.message_bytes = o.bytes;
    s.offset = o.moved;
    s.source = by_address ? std::uint64_t(reinterpret_cast<std::uintptr_t>(o.out.data())) : 0;
    if (by_address) hand_over(s.source);
    if (n != 0) std::memcpy(reinterpret_cast<std::byte*>(&s + 1), o.out.data() + o.moved, n);
    shared(s.sequence).store(++link.head, std::memory_order_release);
    o.state = op_state::moving;
    pushed = true;
    if (by_address) {
      link.sent_by_address.emplace_back(link.sends.front(), link.head);
      link.sends.pop_front();
      continue;
    }
    o.moved += n;
    if (o.moved == o.bytes) {
      o.state = op_state::done;
      link.sends.pop_front();
    }
  }
  if (pushed) ring_if_sleeping(seg_.bell(peer));
}

void engine::pull(int peer) {
  fifo_ends& link = fifos_[std::size_t(peer)];
  if (match_.link(peer) == link_state::broken) return;
  const std::size_t slots = seg_.shape().slots;
  bool pulled = false;
  // A FIFO's worth at most: a peer that keeps filling it would otherwise hold this
  // rank here for the whole of a large message (a call started beside it, say).
  for (std::size_t taken = 0; taken < slots; ++taken) {
    slot_header& s = seg_.slot(peer, rank(), link.tail % slots);
    if (shared(s.sequence).load(std::memory_order_acquire) != link.tail + 1) break;
    if (!well_formed(s, peer)) break;
    if (!match_.in_message(peer) && match_.begin_message(peer, {s.call, s.step}, s.message_bytes) == landing::held) break;
    if (s.source != 0) {
      if (!read_by_address(peer, s)) break;  // more to read next time, or it failed
    } else if (s.fragment_bytes != 0) {
      match_.deliver(peer, {reinterpret_cast<const std::byte*>(&s + 1), s.fragment_bytes});
    }
    shared(seg_.control(peer, rank()).tail).store(++link.tail, std::memory_order_release);
    pulled = true;
  }
  if (pulled) ring_if_sleeping(seg_.bell(peer));
}

bool engine::goes_by_address(int peer, const op& o) {
  return o.moved == 0 && limits_.one_copy_bytes != 0 && o.bytes >= limits_.one_copy_bytes &&
         shared(seg_.control(rank(), peer).one_copy).load(std::memory_order_relaxed) == reads_by_address;
}

bool engine::read_by_address(int peer, slot_header& s) {
  fifo_ends& link = fifos_[std::size_t(peer)];
  constexpr std::size_t staging_bytes = 256 * 1024;  // stays in cache between the read and the reduction
  // As much as a FIFO holds, or 1 MiB, per turn: a call started beside this one moves too.
  std::size_t budget = std::max<std::size_t>(seg_.shape().slots * seg_.shape().slot_bytes, 1u << 20);
  link.reading = true;
  take_over(s.source);
  for (;;) {
    const std::size_t moved = match_.message_moved(peer);
    std::span<std::byte> into = match_.direct_destination(peer);  // a plain receive: straight there
    const bool direct = !into.empty();
    if (!direct) {
      if (staging_.empty()) staging_.resize(staging_bytes);
      into = staging_;
    }
    into = into.first(std::min({into.size(), std::size_t(s.message_bytes) - moved, budget}));
    const ssize_t n = read_peer_memory(seg_.rank(peer).pid, s.source + moved, into);
    const int e = errno;
    // A sender that gave up may reuse its buffer: what was read then does not count.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (shared(seg_.control(peer, rank()).abandoned).load(std::memory_order_relaxed) != 0) {
      link.reading = false;
      return false;
    }
    if (n <= 0) {
      link.reading = false;
      if (e == ESRCH && notice_dead_peer()) return false;
      match_.break_link(peer, "cannot read rank " + std::to_string(peer) + "'s message from its memory (process_vm_readv: " +
                                  (n < 0 ? errno_text(e) : std::string("nothing read")) +
                                  "); COLLECTIVES_SHM_ONE_COPY_BYTES=0 sends every message through the FIFOs");
      return false;
    }
    const bool complete = direct ? match_.delivered_directly(peer, std::size_t(n)) : match_.deliver(peer, into.first(std::size_t(n)));
    if (complete) {
      link.reading = false;
      hand_over(s.source);  // back to the sender, which may write it once the slot is free
      return true;
    }
    // The peers wait on this rank's own sends by address meanwhile: hand them the slots
    // they freed, or they would run dry while this rank reads.
    push_all();
    budget -= std::min(budget, std::size_t(n));
    if (budget == 0) return false;
  }
}

void engine::push_all() {
  for (int p = 0; p < size(); ++p) {
    if (fifos_[std::size_t(p)].sending()) push(p);
  }
}

void engine::try_reading_peers() {
  if (!seg_ || limits_.one_copy_bytes == 0) return;  // the peers find 0 in one_copy: through the FIFO
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    const rank_record& peer = seg_.rank(p);
    const std::string why = peer.pid_namespace != seg_.rank(rank()).pid_namespace
                                ? "it runs in another pid namespace"
                                : why_peer_unreadable(peer.pid, peer.probe_address);
    fifos_[std::size_t(p)].reads_by_address = why.empty();
    shared(seg_.control(p, rank()).one_copy).store(why.empty() ? reads_by_address : by_fifo_only, std::memory_order_release);
    if (!why.empty() && log::enabled(log::level::info))
      log::info("shm rank " + std::to_string(rank()) + ": rank " + std::to_string(p) +
                "'s large messages come through the FIFO, since this rank cannot read its memory: " + why);
  }
}

bool engine::well_formed(const slot_header& s, int peer) {
  const bool starts = !match_.in_message(peer);
  const bool ok =
      s.source != 0  // by address: one slot stands for the whole message until it is read
          ? fifos_[std::size_t(peer)].reads_by_address && s.fragment_bytes == 0 && s.offset == 0 && s.message_bytes > 0 &&
                (starts || (s.message_bytes == match_.message_bytes(peer) && message_tag{s.call, s.step} == match_.message_tag_of(peer)))
          : s.fragment_bytes <= seg_.shape().slot_bytes && s.offset <= s.message_bytes &&
                s.fragment_bytes <= s.message_bytes - s.offset &&
                (starts ? s.offset == 0 && (s.fragment_bytes > 0 || s.message_bytes == 0)
                        : s.offset == match_.message_moved(peer) && s.message_bytes == match_.message_bytes(peer) &&
                              message_tag{s.call, s.step} == match_.message_tag_of(peer) && s.fragment_bytes > 0);
  if (!ok) match_.break_link(peer, "rank " + std::to_string(peer) + " sent a malformed fragment; build a new communicator");
  return ok;
}

void engine::look_at_peer(op& o) {
  // A link this rank broke (it gave up halfway through a message) fails what is posted
  // on it for that (matching's finish says so), whatever the peer did after hearing.
  if (match_.link(o.peer) == link_state::broken) return;
  if (o.type != op_type::send && shared(seg_.control(o.peer, rank()).abandoned).load(std::memory_order_acquire) != 0) {
    pull(o.peer);
    notice_dead_peer();  // a peer gives up after a loss of its own: name that loss first
    throw_if_broken();
    // It failed: its failure, written in the segment before it gave up, comes first.
    if (o.state != op_state::done)
      match_.fail(o, errc::peer_lost, match_.story("rank " + std::to_string(o.peer) +
                                                    " gave up halfway through a message to this rank after a failure"));
  }
  if (shared(seg_.rank(o.peer).state).load(std::memory_order_acquire) == departed) {
    if (o.type != op_type::send) pull(o.peer);  // its last messages are still in the FIFO
    // A peer that left after a failure it learned of left its word in the segment (the
    // group's first failure, which another rank may have written): name that first.
    learn_group_failure();
    match_.depart(o.peer, "rank " + std::to_string(o.peer) + " closed its communicator");
  }
}

bool engine::news() {
  if (broken()) return true;
  bool changed = false;
  const std::size_t slots = seg_.shape().slots;
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    fifo_ends& link = fifos_[std::size_t(p)];
    const slot_header& next = seg_.slot(p, rank(), link.tail % slots);
    const std::uint64_t in = link.tail + (shared(next.sequence).load(std::memory_order_acquire) == link.tail + 1 ? 1 : 0) +
                             shared(seg_.control(p, rank()).abandoned).load(std::memory_order_relaxed);
    // Slots freed are news only to sends waiting for them; otherwise the line the peer
    // writes as it takes each message is left in its cache.
    const std::uint64_t out = link.sending() ? shared(seg_.control(rank(), p).tail).load(std::memory_order_acquire) : link.seen_out;
    const std::uint32_t state = shared(seg_.rank(p).state).load(std::memory_order_acquire);
    if (in != link.seen_in || out != link.seen_out || state != link.seen_state) changed = true;
    if (link.reading && match_.link(p) != link_state::broken) changed = true;  // more of a message to read
    link.seen_in = in;
    link.seen_out = out;
    link.seen_state = state;
  }
  return changed;
}

bool engine::notice_dead_peer() {
  learn_group_failure();  // a rank that died after learning of a failure: name that first
  if (match_.first_lost() >= 0) return true;
  const int dead = watch_.first_dead([&](int p) { return shared(seg_.rank(p).state).load(std::memory_order_acquire) == departed; });
  if (dead < 0) return false;
  match_.lose(dead, "lost rank " + std::to_string(dead) + ": its process (pid " + std::to_string(watch_.pid_of(dead)) + ") died");
  publish(*match_.first_failure());
  return true;
}

}  // namespace collectives::shm_detail
