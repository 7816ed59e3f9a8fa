// A two-level all_reduce: a reduce-scatter among the ranks of each host, an
// all_reduce across hosts among the ranks with the same place on their host, and an
// all-gather on each host. Only 1/L of the buffer per rank crosses the network (L
// ranks per host), and the links between hosts carry one stream per local rank in
// parallel instead of the flat ring's two hops through each host.
//
// hierarchical<Intra, Inter> composes the schedules of two algorithms: Intra's
// reduce_scatterv and all_gatherv on the host's ranks, Inter's all_reduce across
// hosts. Each part is planned for its own group as if it ran alone, then its peers are
// renumbered to the whole group's ranks, its buffers moved into this schedule's, its
// tags into a range of its own, and it starts once the part before it has ended on
// this rank. A large buffer goes through in pieces, one after another, so that the
// host's parts of one piece run while the piece before it crosses between hosts. The hosts come from the call (plan_request::hosts, learned from the
// ranks once per communicator: detail/hosts.hpp).
//
// Each element is reduced across hosts by one all_reduce, whose result every rank of
// the cross-host group gets bit for bit, then copied to the host's other ranks: every
// rank gets the same bits. The op must be commutative (the host's part is reduced
// before the other hosts' parts). Hosts with different rank counts have no common
// cut: then Inter's all_reduce runs over all ranks, as flat.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "../concepts/algorithm.hpp"
#include "ring.hpp"
#include "schedule.hpp"

namespace collectives {

template <class Intra = ring, class Inter = ring>
struct hierarchical {
  static_assert(implements<Intra, kind::reduce_scatterv> && implements<Intra, kind::all_gatherv>,
                "collectives: hierarchical<Intra, Inter>: Intra must implement reduce_scatterv and all_gatherv");
  static_assert(implements<Inter, kind::all_reduce>, "collectives: hierarchical<Intra, Inter>: Inter must implement all_reduce");

  static constexpr const char* name = "hierarchical";
  static constexpr bool preserves_rank_order = false;
  static constexpr bool needs_hosts = true;  // the call fills plan_request::hosts

  // Where this rank stands: its host's ranks, the ranks with its place on every
  // host, and its place in each. Empty when the hosts differ in size.
  struct layout {
    std::vector<int> on_host, across;  // ranks of the whole group, in rank order / host order
    int local = 0, host = 0;
    bool uniform = false;
  };

  static layout layout_of(const plan_request& req) {
    layout l;
    if (req.hosts.size() != std::size_t(req.size)) return l;  // no hosts given: flat
    const int mine = req.hosts[std::size_t(req.rank)];
    std::vector<int> first_rank_of_host, size_of_host;
    for (int q = 0; q < req.size; ++q) {
      const int h = req.hosts[std::size_t(q)];
      if (h >= int(size_of_host.size())) size_of_host.resize(std::size_t(h) + 1, 0);
      ++size_of_host[std::size_t(h)];
      if (h == mine) l.on_host.push_back(q);
    }
    l.uniform = std::all_of(size_of_host.begin(), size_of_host.end(), [&](int n) { return n == size_of_host[0]; });
    if (!l.uniform) return l;
    l.local = int(std::find(l.on_host.begin(), l.on_host.end(), req.rank) - l.on_host.begin());
    std::vector<int> seen(size_of_host.size(), 0);  // ranks met so far on each host
    for (int q = 0; q < req.size; ++q) {
      const int h = req.hosts[std::size_t(q)];
      if (seen[std::size_t(h)]++ == l.local) {
        if (q == req.rank) l.host = int(l.across.size());
        l.across.push_back(q);
      }
    }
    return l;
  }

  static schedule plan(kind::all_reduce, const plan_request& req) {
    const layout l = layout_of(req);
    if (!l.uniform) return Inter::plan(kind::all_reduce{}, req);
    // One level only (one host, or a rank a host): that level's all_reduce, without the
    // pieces and the scratch between parts (on one host they made large calls two times
    // slower than Intra's own all_reduce).
    if constexpr (implements<Intra, kind::all_reduce>)
      if (l.across.size() == 1) return Intra::plan(kind::all_reduce{}, one_level(req));
    if (l.on_host.size() == 1) return Inter::plan(kind::all_reduce{}, one_level(req));
    // Pieces of the buffer, each through the three parts, one after another: the
    // host's part of piece j+1 runs while piece j crosses between hosts.
    const std::size_t pieces = piece_count(req);
    std::vector<op_id> scattered, reduced, gathered;  // the previous piece's last operations of each part
    schedule s;
    for (std::size_t j = 0; j < pieces; ++j) {
      const auto piece = plan::even_chunk(req.count, int(pieces), int(j));
      const auto tags = static_cast<std::uint32_t>(j) << piece_shift;
      const int ranks_here = int(l.on_host.size());
      const auto counts = plan::even_chunk_counts(piece.count, ranks_here);
      const std::size_t own = counts[std::size_t(l.local)];
      const region partial = s.reserve_scratch(own), total = s.reserve_scratch(own);
      plan_request part = req;
      part.hosts = {};

      // 1. Reduce-scatter on the host: this rank's part of the host's sum, into scratch.
      part.rank = l.local;
      part.size = ranks_here;
      part.counts = counts;
      part.count = own;
      part.finalize = false;
      scattered = append(s, Intra::plan(kind::reduce_scatterv{}, part), l.on_host, tags, scattered,
                         {{buffer_id::input, piece.offset}, {buffer_id::scratch, partial.offset}});
      // 2. All-reduce across hosts of that part: the whole group's sum (finalized).
      part.rank = l.host;
      part.size = int(l.across.size());
      part.counts = {};
      part.finalize = req.finalize;
      reduced = append(s, Inter::plan(kind::all_reduce{}, part), l.across, tags, joined(scattered, reduced),
                       {{buffer_id::scratch, partial.offset}, {buffer_id::scratch, total.offset}});
      // 3. All-gather on the host: every part into the output.
      part.rank = l.local;
      part.size = ranks_here;
      part.counts = counts;
      part.finalize = false;
      gathered = append(s, Intra::plan(kind::all_gatherv{}, part), l.on_host, tags | gather_bit, joined(reduced, gathered),
                        {{buffer_id::scratch, total.offset}, {buffer_id::output, piece.offset}});
    }
    return s;
  }

  // Estimated seconds (alpha-beta, as the parts' own estimates) of a pipeline of
  // pieces: each piece's host parts over on-host links and its crossing over the slower
  // ones; after the first piece's two, one stage, the longer, per further piece.
  static double cost(kind::all_reduce, const plan_request& req)
    requires estimates_cost<Intra, kind::reduce_scatter> && estimates_cost<Intra, kind::all_gather> &&
             estimates_cost<Inter, kind::all_reduce>
  {
    const layout l = layout_of(req);
    if (!l.uniform) return Inter::cost(kind::all_reduce{}, req);
    if constexpr (estimates_cost<Intra, kind::all_reduce>)
      if (l.across.size() == 1) {
        plan_request here = one_level(req);
        here.costs = req.on_host_costs;
        return cost_of<Intra>(kind::all_reduce{}, here);
      }
    if (l.on_host.size() == 1) return Inter::cost(kind::all_reduce{}, one_level(req));
    const std::size_t pieces = piece_count(req), ranks_here = l.on_host.size();
    plan_request part = req;
    part.hosts = {};
    part.counts = {};
    part.count = (req.count + pieces * ranks_here - 1) / (pieces * ranks_here);  // one piece's part
    part.size = int(l.across.size());
    const double crossing = Inter::cost(kind::all_reduce{}, part);
    part.size = int(ranks_here);
    part.costs = req.on_host_costs;
    const double on_host = cost_of<Intra>(kind::reduce_scatter{}, part) + cost_of<Intra>(kind::all_gather{}, part);
    return on_host + crossing + double(pieces - 1) * std::max(on_host, crossing);
  }

  // Up to 16 pieces of at least 2 MiB: fewer pieces of a small buffer, whose time is
  // in its latencies, not in its bytes.
  static std::size_t piece_count(const plan_request& req) {
    const std::size_t bytes = req.count * (req.element_size ? req.element_size : 1);
    return std::clamp<std::size_t>(bytes / (std::size_t(2) << 20), 1, 16);
  }

  static plan_request one_level(plan_request req) {
    req.hosts = {};
    return req;
  }

  static std::vector<op_id> joined(std::vector<op_id> a, const std::vector<op_id>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  // Where a part's input and output land in the whole schedule's buffers.
  struct placement {
    buffer_id buffer;
    std::size_t offset;
  };
  struct placements {
    placement input, output;
  };

  // Tags: each piece's parts carry its number in bits 24-30. The part across hosts
  // talks only to other hosts, the two on the host only to this host, so only those
  // two need tags apart: the all-gather's get the top bit. A part's own tags must
  // leave bits 24-30 free, and Intra's all-gather the top bit too.
  static constexpr int piece_shift = 24;
  static constexpr std::uint32_t gather_bit = std::uint32_t(1) << 31;
  static constexpr std::uint32_t piece_bits = std::uint32_t(0x7F) << piece_shift;

  // Appends `part`, planned for the group `members` (its ranks' numbers in the whole
  // group), its tags or'ed with `tags`: each of its first operations waits for
  // `after`. Returns its last operations (those none of its others waits for).
  static std::vector<op_id> append(schedule& s, const schedule& part, const std::vector<int>& members,
                                   std::uint32_t tags, const std::vector<op_id>& after, placements where) {
    if (part.ops.empty()) return after;  // nothing here: the next part waits for the one before
    const auto base = static_cast<op_id>(s.ops.size());
    const std::size_t scratch = s.scratch_count, staging = s.staging_count;
    auto place = [&](region r) {
      switch (r.buffer) {
        case buffer_id::input: return region{where.input.buffer, where.input.offset + r.offset, r.count};
        case buffer_id::output: return region{where.output.buffer, where.output.offset + r.offset, r.count};
        case buffer_id::scratch: return region{buffer_id::scratch, scratch + r.offset, r.count};
        case buffer_id::staging: return region{buffer_id::staging, staging + r.offset, r.count};
      }
      return r;
    };
    std::vector<bool> waited_for(part.ops.size(), false);
    std::vector<op_id> deps;
    for (const operation& op : part.ops) {
      operation o = op;
      if (o.peer >= 0) o.peer = members[std::size_t(o.peer)];
      if (is_message(o.kind)) {
        if (o.tag & (tags & gather_bit ? piece_bits | gather_bit : piece_bits))
          throw std::length_error("hierarchical: a part's tags use the bits that number its pieces");
        o.tag |= tags;
      }
      o.dst = place(o.dst);
      o.src = place(o.src);
      o.base = place(o.base);
      deps.clear();
      for (op_id d : part.deps_of(op)) {
        deps.push_back(base + d);
        waited_for[d] = true;
      }
      if (deps.empty()) deps = after;
      s.add(o, deps);
    }
    s.scratch_count = scratch + part.scratch_count;
    s.staging_count = staging + part.staging_count;
    std::vector<op_id> ends;
    for (std::size_t i = 0; i < part.ops.size(); ++i)
      if (!waited_for[i]) ends.push_back(base + op_id(i));
    return ends;
  }
};

}  // namespace collectives
