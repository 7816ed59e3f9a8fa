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
// this rank. The hosts come from the call (plan_request::hosts, learned from the
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
    const int ranks_here = int(l.on_host.size());
    std::vector<std::size_t> counts;
    for (int i = 0; i < ranks_here; ++i) counts.push_back(plan::even_chunk(req.count, ranks_here, i).count);
    const std::size_t own = counts[std::size_t(l.local)];

    schedule s;
    const region reduced = s.reserve_scratch(own), everywhere = s.reserve_scratch(own);
    plan_request part = req;
    part.hosts = {};

    // 1. Reduce-scatter on the host: this rank's part of the host's sum, into scratch.
    part.rank = l.local;
    part.size = ranks_here;
    part.counts = counts;
    part.count = own;
    part.finalize = false;
    std::vector<op_id> ends =
        append(s, Intra::plan(kind::reduce_scatterv{}, part), l.on_host, 0, {},
               {{buffer_id::input, 0}, {buffer_id::scratch, reduced.offset}});
    // 2. All-reduce across hosts of that part: the whole group's sum (finalized).
    part.rank = l.host;
    part.size = int(l.across.size());
    part.counts = {};
    part.finalize = req.finalize;
    ends = append(s, Inter::plan(kind::all_reduce{}, part), l.across, 1, ends,
                  {{buffer_id::scratch, reduced.offset}, {buffer_id::scratch, everywhere.offset}});
    // 3. All-gather on the host: every part into the output.
    part.rank = l.local;
    part.size = ranks_here;
    part.counts = counts;
    part.finalize = false;
    append(s, Intra::plan(kind::all_gatherv{}, part), l.on_host, 2, ends,
           {{buffer_id::scratch, everywhere.offset}, {buffer_id::output, 0}});
    return s;
  }

  // Where a part's input and output land in the whole schedule's buffers.
  struct placement {
    buffer_id buffer;
    std::size_t offset;
  };
  struct placements {
    placement input, output;
  };

  // Tags: the part across hosts talks only to other hosts, the two on the host only
  // to this host, so only those two need tags apart: the all-gather's get the top bit.
  static constexpr std::uint32_t gather_bit = std::uint32_t(1) << 31;

  // Appends `part`, planned for the group `members` (its ranks' numbers in the whole
  // group), as the `phase`-th part: each of its first operations waits for `after`.
  // Returns its last operations (those none of its others waits for).
  static std::vector<op_id> append(schedule& s, const schedule& part, const std::vector<int>& members, int phase,
                                   const std::vector<op_id>& after, placements where) {
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
      if (phase == 2 && (o.kind == op_kind::send || o.kind == op_kind::recv || o.kind == op_kind::recv_reduce)) {
        if (o.tag & gather_bit) throw std::length_error("hierarchical: Intra's all_gatherv uses the top bit of its tags");
        o.tag |= gather_bit;
      }
      o.dst = place(o.dst);
      o.src = place(o.src);
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
