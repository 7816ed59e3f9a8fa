// Direct: every rank exchanges with every other rank in one round. Fewest steps, so
// best for small messages, and the natural algorithm for all_to_all. Reductions are
// done by the chunk's owner, which combines the parts in rank order, so
// non-commutative ops are fine.
#pragma once

#include <vector>

#include "../concepts/algorithm.hpp"
#include "schedule.hpp"

namespace collectives {

struct direct {
  static constexpr const char* name = "direct";
  static constexpr bool preserves_rank_order = true;

  static schedule plan(kind::broadcast, const plan_request& req) {
    schedule s;
    const region in{buffer_id::input, 0, req.count}, out{buffer_id::output, 0, req.count};
    if (req.rank != req.root) {
      s.recv(req.root, 0, out);
      return s;
    }
    s.copy(out, in);
    for (int q = 0; q < req.size; ++q)
      if (q != req.root) s.send(q, 0, in);
    return s;
  }

  static schedule plan(kind::reduce, const plan_request& req) {
    schedule s;
    const region in{buffer_id::input, 0, req.count};
    if (req.rank != req.root) {
      s.send(req.root, 0, in);
      return s;
    }
    const region out{buffer_id::output, 0, req.count};
    const op_id init = s.copy(out, in);
    const auto parts = receive_parts(s, req, [&](int) { return req.count; }, 0);
    finish(s, req, out, combine_in_rank_order(s, req.rank, out, parts, init));
    return s;
  }

  static schedule plan(kind::all_reduce, const plan_request& req) {
    std::vector<std::size_t> counts(std::size_t(req.size));
    for (int c = 0; c < req.size; ++c) counts[std::size_t(c)] = plan::even_chunk(req.count, req.size, c).count;
    const auto displ = plan::displacements(counts);
    auto chunk = [&](buffer_id b, int c) { return region{b, displ[std::size_t(c)], counts[std::size_t(c)]}; };
    const int r = req.rank;
    schedule s;
    // Reduce-scatter: rank c gathers and combines chunk c.
    std::vector<op_id> scattered(std::size_t(req.size), no_op);
    for (int q = 0; q < req.size; ++q)
      if (q != r) scattered[std::size_t(q)] = s.send(q, 0, chunk(buffer_id::input, q));
    const op_id init = s.copy(chunk(buffer_id::output, r), chunk(buffer_id::input, r));
    const auto parts = receive_parts(s, req, [&](int) { return counts[std::size_t(r)]; }, 0);
    const op_id own = finish(s, req, chunk(buffer_id::output, r),
                             combine_in_rank_order(s, r, chunk(buffer_id::output, r), parts, init));
    // All-gather: every owner sends its finished chunk to everyone. A receive may
    // overwrite its chunk only after the input there was sent (in-place calls).
    for (int q = 0; q < req.size; ++q) {
      if (q == r) continue;
      s.send(q, 1, chunk(buffer_id::output, r), {own});
      s.recv(q, 1, chunk(buffer_id::output, q), {scattered[std::size_t(q)]});
    }
    return s;
  }

  static schedule plan(kind::reduce_scatter, const plan_request& req) {
    return reduce_scatter(req, std::vector<std::size_t>(std::size_t(req.size), req.count));
  }
  static schedule plan(kind::reduce_scatterv, const plan_request& req) {
    return reduce_scatter(req, {req.counts.begin(), req.counts.end()});
  }

  static schedule plan(kind::all_gather, const plan_request& req) {
    return all_gather(req, std::vector<std::size_t>(std::size_t(req.size), req.count));
  }
  static schedule plan(kind::all_gatherv, const plan_request& req) {
    return all_gather(req, {req.counts.begin(), req.counts.end()});
  }

  static schedule plan(kind::gather, const plan_request& req) {
    return gather(req, std::vector<std::size_t>(std::size_t(req.size), req.count));
  }
  static schedule plan(kind::gatherv, const plan_request& req) { return gather(req, {req.counts.begin(), req.counts.end()}); }

  static schedule plan(kind::scatter, const plan_request& req) {
    return scatter(req, std::vector<std::size_t>(std::size_t(req.size), req.count));
  }
  static schedule plan(kind::scatterv, const plan_request& req) {
    return scatter(req, {req.counts.begin(), req.counts.end()});
  }

  static schedule plan(kind::all_to_all, const plan_request& req) {
    const std::vector<std::size_t> counts(std::size_t(req.size), req.count);
    return all_to_all(req, counts, counts);
  }
  static schedule plan(kind::all_to_allv, const plan_request& req) {
    return all_to_all(req, {req.counts.begin(), req.counts.end()}, {req.recv_counts.begin(), req.recv_counts.end()});
  }

  // Dissemination barrier: in round k every rank signals rank + 2^k and waits for
  // rank - 2^k; after ceil(log2 P) rounds everyone has heard from everyone. The
  // signal is the one-element input (the caller runs it with one-byte elements).
  static schedule plan(kind::barrier, const plan_request& req) {
    schedule s;
    const int p = req.size, r = req.rank;
    int rounds = 0;
    while ((1 << rounds) < p) ++rounds;
    const region signal{buffer_id::input, 0, 1};
    op_id heard = no_op;
    for (int k = 0; k < rounds; ++k) {
      const auto tag = static_cast<std::uint32_t>(k);
      s.send((r + (1 << k)) % p, tag, signal, {heard});
      heard = s.recv(plan::mod(r - (1 << k), p), tag, s.reserve_scratch(1), {heard});
    }
    return s;
  }

 private:
  using counts_t = std::vector<std::size_t>;

  // Receives every other rank's part into its own scratch slot; [q] is the receive
  // from rank q (no_op for this rank). `size_of(q)` is the part's element count.
  template <class SizeOf>
  static std::vector<std::pair<op_id, region>> receive_parts(schedule& s, const plan_request& req, SizeOf size_of,
                                                             std::uint32_t tag) {
    std::vector<std::pair<op_id, region>> parts(std::size_t(req.size), {no_op, region{}});
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

  static schedule reduce_scatter(const plan_request& req, const counts_t& counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    for (int q = 0; q < req.size; ++q)
      if (q != r) s.send(q, 0, {buffer_id::input, displ[std::size_t(q)], counts[std::size_t(q)]});
    const region out{buffer_id::output, 0, counts[std::size_t(r)]};
    const op_id init = s.copy(out, {buffer_id::input, displ[std::size_t(r)], counts[std::size_t(r)]});
    const auto parts = receive_parts(s, req, [&](int) { return counts[std::size_t(r)]; }, 0);
    finish(s, req, out, combine_in_rank_order(s, r, out, parts, init));
    return s;
  }

  static schedule all_gather(const plan_request& req, const counts_t& counts) {
    const auto displ = plan::displacements(counts);
    const int r = req.rank;
    schedule s;
    const region in{buffer_id::input, 0, counts[std::size_t(r)]};
    s.copy({buffer_id::output, displ[std::size_t(r)], counts[std::size_t(r)]}, in);
    for (int q = 0; q < req.size; ++q) {
      if (q == r) continue;
      s.send(q, 0, in);
      s.recv(q, 0, {buffer_id::output, displ[std::size_t(q)], counts[std::size_t(q)]});
    }
    return s;
  }

  static schedule gather(const plan_request& req, const counts_t& counts) {
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

  static schedule scatter(const plan_request& req, const counts_t& counts) {
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

  static schedule all_to_all(const plan_request& req, const counts_t& sent, const counts_t& received) {
    const auto send_displ = plan::displacements(sent), recv_displ = plan::displacements(received);
    const int r = req.rank;
    schedule s;
    for (int q = 0; q < req.size; ++q) {
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
