// Direct: every rank exchanges with every other rank in one round. Fewest steps, so
// best for small messages, and the natural algorithm for all_to_all. Reductions are
// done by the chunk's owner (in a small all_reduce, by every rank in the owners'
// order), which combines the parts in rank order, so non-commutative ops are fine.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "../concepts/algorithm.hpp"
#include "../config.hpp"
#include "schedule.hpp"

namespace collectives {

// direct's tuning, as plain data.
struct direct_policy {
  // Largest per-rank buffer, in bytes, whose all_reduce runs in one round instead of
  // two. One round saves a message latency and P-1 message start-ups (5 us at P = 2
  // on inproc, 29 us on tcp), but each rank then sends and combines (P-1)·N bytes,
  // where two rounds send 2(P-1)/P·N and combine (P-1)/P·N. Measured on inproc on the
  // 2-core development machine, one round stays ahead up to 8 KiB at P = 2, 4 and 8
  // and falls behind between 16 and 32 KiB; tcp's costlier latency moves the break-even
  // further out. Both schedules combine every element in the same order, so this
  // moves the time of a call, never its bits.
  std::size_t one_round_all_reduce_max_bytes = 8 * 1024;
};

struct direct {
  static constexpr const char* name = "direct";
  static constexpr bool preserves_rank_order = true;
  static constexpr direct_policy policy{};

  COLLECTIVES_DECL static schedule plan(kind::broadcast, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::reduce, const plan_request& req);

  // Small buffers in one round, larger ones in two (see direct_policy).
  COLLECTIVES_DECL static schedule plan(kind::all_reduce, const plan_request& req);

  // The same on every rank: it depends only on the count and the element size.
  static bool runs_in_one_round(const plan_request& req) {
    return req.count * req.element_size <= policy.one_round_all_reduce_max_bytes;
  }

  // One round (tag 0): every rank sends its whole input to every other rank and
  // combines all P parts itself, in the order the two-round schedule uses, so that
  // every rank and both schedules give the same bits. There the owner of chunk c
  // starts from x_c, takes x_(c-1), ..., x_0 as left operands, then x_(c+1), ...,
  // x_(P-1) as right operands. Here one reduce per rank q and side serves all chunks
  // at once: x_q is the left operand of chunks q+1..P-1 (q from P-2 down to 0), then
  // the right operand of chunks 0..q-1 (q from 1 up): 2(P-1) reduces, not P-1 per
  // chunk. It accumulates in scratch, as an in-place output is the input being sent.
  // At P = 2 that is one combine, x_0 op x_1, which the receive makes onto the input
  // as the peer's part arrives (the send may not finish before the peer's receive is
  // posted, so the receive cannot wait for it to write the output).
  COLLECTIVES_DECL static schedule all_reduce_in_one_round(const plan_request& req);

  // Two rounds: a reduce-scatter in which the owner of chunk c combines it, then an
  // all-gather of the finished chunks.
  COLLECTIVES_DECL static schedule all_reduce_in_two_rounds(const plan_request& req);

  // The v-forms; their even forms are these with every count alike (plan_of).
  COLLECTIVES_DECL static schedule plan(kind::reduce_scatterv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::all_gatherv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::gatherv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::scatterv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::all_to_allv, const plan_request& req);

  // Dissemination barrier: in round k every rank signals rank + 2^k and waits for
  // rank - 2^k; after ceil(log2 P) rounds everyone has heard from everyone. The
  // signal is the one-element input (the caller runs it with one-byte elements).
  COLLECTIVES_DECL static schedule plan(kind::barrier, const plan_request& req);

  // Estimated seconds for one call (alpha-beta model; automatic picks the cheapest):
  // latency of the rounds, the start-up of each concurrent message, the bytes the
  // busiest rank moves and, where reductions cannot overlap with transfers, the time
  // to combine them.
  static double cost(kind::all_reduce, const plan_request& r) {
    const int p = r.size;
    const double bytes = plan::bytes_of(r);
    const link_costs& c = r.costs;
    if (bytes <= double(policy.one_round_all_reduce_max_bytes))
      // One round of P-1 concurrent messages of the whole buffer; each rank combines
      // all it received.
      return c.latency_s + (p - 1) * (c.per_message_s + bytes * (c.seconds_per_byte + c.reduce_seconds_per_byte));
    const double share = bytes * (p - 1) / p;
    // Two rounds of P-1 concurrent messages; the owner combines only after receiving.
    return 2.0 * c.latency_s + 2.0 * (p - 1) * c.per_message_s + 2.0 * share * c.seconds_per_byte +
           share * c.reduce_seconds_per_byte;
  }
  // broadcast, reduce: the root alone; all_gatherv, reduce_scatterv: one round of P-1
  // messages of the largest part.
  static double cost(kind::broadcast, const plan_request& r) { return one_round_cost(r, plan::bytes_of(r)); }
  static double cost(kind::reduce, const plan_request& r) { return one_round_cost(r, plan::bytes_of(r)); }
  static double cost(kind::all_gatherv, const plan_request& r) { return one_round_cost(r, plan::largest_part_bytes(r)); }
  static double cost(kind::reduce_scatterv, const plan_request& r) { return one_round_cost(r, plan::largest_part_bytes(r)); }

 private:
  static double one_round_cost(const plan_request& r, double bytes) {
    return r.costs.latency_s + (r.size - 1) * (r.costs.per_message_s + bytes * r.costs.seconds_per_byte);
  }

  using counts_t = std::span<const std::size_t>;

  // The k-th peer (k = 1..P-1) a rank sends to where every rank sends to every other:
  // from the next rank on, so that in each turn every rank sends to a different one
  // and every port receives one message. Were each rank to go from rank 0 up, all
  // would send to the same rank first, and the last rank would get its P-1 messages
  // only at the end, one after another through its one port.
  static int peer_after(int rank, int k, int size) { return (rank + k) % size; }

  // Receives every other rank's part into its own scratch slot; [q] is the receive
  // from rank q (no_dependency for this rank). `size_of(q)` is the part's element count.
  template <class SizeOf>
  static std::vector<std::pair<op_id, region>> receive_parts(schedule& s, const plan_request& req, SizeOf size_of,
                                                             std::uint32_t tag) {
    std::vector<std::pair<op_id, region>> parts(std::size_t(req.size), {no_dependency, region{}});
    for (int q = 0; q < req.size; ++q) {
      if (q == req.rank) continue;
      const region slot = s.reserve_scratch(size_of(q));
      parts[std::size_t(q)] = {s.recv(q, tag, slot), slot};
    }
    return parts;
  }

  // dst holds this rank's part; fold in lower ranks right to left, then higher ranks
  // left to right: x0 op (x1 op (... op x_me)) op ... op x(P-1).
  static op_id combine_in_rank_order(schedule& s, int me, region dst, const std::vector<std::pair<op_id, region>>& parts,
                                     op_id last) {
    for (int q = me - 1; q >= 0; --q)
      last = s.reduce(dst, parts[std::size_t(q)].second, operand_order::received_first, {last, parts[std::size_t(q)].first});
    for (int q = me + 1; q < int(parts.size()); ++q)
      last = s.reduce(dst, parts[std::size_t(q)].second, operand_order::received_last, {last, parts[std::size_t(q)].first});
    return last;
  }

  static op_id finish(schedule& s, const plan_request& req, region dst, op_id combined) {
    return req.finalize ? s.finalize(dst, {combined}) : combined;
  }

  static schedule reduce_scatter(const plan_request& req, counts_t counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    for (int k = 1; k < req.size; ++k) {
      const int q = peer_after(r, k, req.size);
      s.send(q, 0, {buffer_id::input, displ[std::size_t(q)], counts[std::size_t(q)]});
    }
    const region out{buffer_id::output, 0, counts[std::size_t(r)]};
    const op_id init = s.copy(out, {buffer_id::input, displ[std::size_t(r)], counts[std::size_t(r)]});
    const auto parts = receive_parts(s, req, [&](int) { return counts[std::size_t(r)]; }, 0);
    finish(s, req, out, combine_in_rank_order(s, r, out, parts, init));
    return s;
  }

  static schedule all_gather(const plan_request& req, counts_t counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    const region in{buffer_id::input, 0, counts[std::size_t(r)]};
    s.copy({buffer_id::output, displ[std::size_t(r)], counts[std::size_t(r)]}, in);
    for (int k = 1; k < req.size; ++k) {
      const int q = peer_after(r, k, req.size);
      s.send(q, 0, in);
      s.recv(q, 0, {buffer_id::output, displ[std::size_t(q)], counts[std::size_t(q)]});
    }
    return s;
  }

  static schedule gather(const plan_request& req, counts_t counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    const region in{buffer_id::input, 0, counts[std::size_t(r)]};
    if (r != req.root) {
      s.send(req.root, 0, in);
      return s;
    }
    for (int q = 0; q < req.size; ++q) {
      const region slot{buffer_id::output, displ[std::size_t(q)], counts[std::size_t(q)]};
      if (q == r) s.copy(slot, in);
      else s.recv(q, 0, slot);
    }
    return s;
  }

  static schedule scatter(const plan_request& req, counts_t counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    const region out{buffer_id::output, 0, counts[std::size_t(r)]};
    if (r != req.root) {
      s.recv(req.root, 0, out);
      return s;
    }
    for (int q = 0; q < req.size; ++q) {
      const region part{buffer_id::input, displ[std::size_t(q)], counts[std::size_t(q)]};
      if (q == r) s.copy(out, part);
      else s.send(q, 0, part);
    }
    return s;
  }

  static schedule all_to_all(const plan_request& req, counts_t sent, counts_t received) {
    const auto send_displ = plan::displacements(sent), recv_displ = plan::displacements(received);
    const int r = req.rank;
    schedule s;
    for (int k = 0; k < req.size; ++k) {  // from the rank itself on: rank r's plan is rank 0's turned by r,
      const int q = (r + k) % req.size;   // and no rank is every rank's first peer
      const region part{buffer_id::input, send_displ[std::size_t(q)], sent[std::size_t(q)]};
      const region slot{buffer_id::output, recv_displ[std::size_t(q)], received[std::size_t(q)]};
      if (q == r) {
        s.copy(slot, part);
      } else {
        s.send(q, 0, part);
        s.recv(q, 0, slot);
      }
    }
    return s;
  }
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "direct.ipp"
#endif
