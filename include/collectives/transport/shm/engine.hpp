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
//
// A message of one_copy_bytes or more, to a peer that can read this rank's memory,
// goes as a single slot holding its address (one_copy.hpp): the receiver reads it
// straight into the posted receive, or through a small staging buffer into a fused
// receive's reduction, and frees the slot when it has all of it, which completes the
// send.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../../concepts/transport.hpp"
#include "../../config.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "../detail/matching.hpp"
#include "one_copy.hpp"
#include "options.hpp"
#include "segment.hpp"
#include "waiting.hpp"

namespace collectives::shm_detail {

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::no_slot;
using transport_detail::op_state;
using transport_detail::op_type;

class engine {
 public:
  COLLECTIVES_DECL engine(int rank, segment seg, engine_limits limits);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Says goodbye: peers still expecting something from this rank fail instead of waiting.
  COLLECTIVES_DECL ~engine();

  int rank() const { return match_.rank(); }
  int size() const { return match_.size(); }
  const segment& shared_segment() const { return seg_; }
  bool reads_memory_of(int peer) const { return peer != rank() && fifos_[std::size_t(peer)].reads_by_address; }
  process_watch& watch() { return watch_; }

  COLLECTIVES_DECL std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data);
  COLLECTIVES_DECL std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into);
  COLLECTIVES_DECL std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink);
  COLLECTIVES_DECL bool test(std::uint32_t& slot);

  // Polls briefly (a peer's answer often comes sooner than a sleeper is woken), then
  // sleeps on the doorbell, waking now and then to see that the peers live. While
  // polling, a rank bound to a core of its own keeps it (a yield could hand it to
  // another process for a whole time slice); any other rank yields after a few turns,
  // since the peer it waits for may be waiting for this very core.
  COLLECTIVES_DECL bool wait_for_activity(deadline until);

  COLLECTIVES_DECL void cancel(std::uint32_t& slot) noexcept;

  // Thread-safe: marks the group aborted and wakes every rank.
  COLLECTIVES_DECL void abort();

  COLLECTIVES_DECL void throw_if_broken();

  // This rank's call failed (`what`, its error's text): the reason it gives the peers
  // when it leaves, unless an earlier failure is known.
  COLLECTIVES_DECL void note_own_failure(std::string_view what);

 private:
  using op = transport_detail::operation<>;

  // This rank's ends of the two FIFOs it shares with a peer.
  struct fifo_ends {
    // Sending: operations in the order posted; the FIFO's next sequence number.
    std::deque<std::uint32_t> sends;
    std::uint64_t head = 0, known_tail = 0;
    // Sends that went by address, in order, each with its slot's sequence number: done
    // once the peer has read it and freed the slot.
    std::deque<std::pair<std::uint32_t, std::uint64_t>> sent_by_address;
    // Sends this rank still has for the peer: queued, or waiting for it to read them.
    bool sending() const { return !sends.empty() || !sent_by_address.empty(); }
    // Receiving: the next sequence number expected.
    std::uint64_t tail = 0;
    // Whether this rank reads the peer's large messages from its memory, and whether it
    // is partway through one.
    bool reads_by_address = false, reading = false;
    // What the last wait saw, so that only changes count as news.
    std::uint64_t seen_in = 0, seen_out = 0;
    std::uint32_t seen_state = attached;
  };

  // An abort by any rank is a word in the segment, and so is the group's first
  // failure; the matching engine learns of both here.
  COLLECTIVES_DECL void note_abort();

  // The group's first failure: the first rank to learn of one writes it in the
  // segment, and every rank names it in its errors, so that a survivor names the rank
  // that failed first, not one that left because of it. A rank that leaves after a
  // failure writes why (its own call's failure, or the exception its program leaves by).
  using failure = transport_detail::matching_engine<>::failure;
  COLLECTIVES_DECL void publish(const failure& f);
  COLLECTIVES_DECL void learn_group_failure();
  COLLECTIVES_DECL bool broken();

  COLLECTIVES_DECL std::uint32_t pulled(std::uint32_t slot);

  // Copies as many fragments of the peer's queued sends into its FIFO as fit.
  COLLECTIVES_DECL void push(int peer);

  // Hands the peer's arrived fragments to the matching engine, as far as it takes
  // them: a message it holds back (large, its receive not posted) stays in the FIFO.
  COLLECTIVES_DECL void pull(int peer);

  // Whether the peer sends its front message by address: large enough, and the peer
  // said it reads this rank's memory.
  COLLECTIVES_DECL bool goes_by_address(int peer, const op& o);

  // Reads on in the message whose address is in slot `s`, a budget's worth at most.
  // True once all of it has been read (the slot is then the peer's again).
  COLLECTIVES_DECL bool read_by_address(int peer, slot_header& s);

  // push() to every peer this rank has sends queued for or read by address.
  COLLECTIVES_DECL void push_all();

  // Tries reading each peer's memory, and tells the peer whether to send by address.
  COLLECTIVES_DECL void try_reading_peers();

  // A fragment must continue the message in progress, or start one at offset 0.
  COLLECTIVES_DECL bool well_formed(const slot_header& s, int peer);

  // An operation whose peer gave up or left: what it sent before still counts.
  COLLECTIVES_DECL void look_at_peer(op& o);

  // True when anything changed since the last look: a fragment arrived, slots were
  // freed, a peer left or gave up, the group was aborted.
  COLLECTIVES_DECL bool news();

  COLLECTIVES_DECL bool notice_dead_peer();

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
  std::vector<std::byte> staging_;  // a fused receive's bytes read by address pass through here
  process_watch watch_;
  deadline next_watch_{};
  bool learned_failure_ = false;
};

}  // namespace collectives::shm_detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "engine.ipp"
#endif
