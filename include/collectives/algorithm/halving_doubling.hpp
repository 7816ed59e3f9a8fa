// Recursive halving-doubling (Rabenseifner): a reduce-scatter by recursive halving,
// then an all-gather by recursive doubling. At each halving step a rank swaps half of
// what it still holds with the rank whose number differs in one bit and reduces the
// half it keeps; log2(P) steps leave each rank one reduced block, and log2(P) doubling
// steps spread the blocks. It moves the ring's bytes (2(P-1)/P of the buffer per rank
// in all_reduce) in 2 log2(P) steps instead of 2(P-1).
//
// A rank count P that is not a power of two is folded first: with P' the largest power
// of two below P and E = P - P', each even rank below 2E hands its whole input to the
// odd rank above it, which stands for both in the P' ranks of the halving and doubling
// (new rank n stands for old ranks 2n and 2n+1 when n < E, else for old rank n + E),
// and gets its result back at the end: two more steps, each of the whole buffer.
//
// Partners differ in a high bit first, so a rank combines parts of ranks that are not
// neighbours: the op must be commutative, as for ring. Every element is reduced by
// one rank only, so every rank gets the same bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../concepts/algorithm.hpp"
#include "../config.hpp"
#include "schedule.hpp"

namespace collectives {

struct halving_doubling {
  static constexpr const char* name = "halving_doubling";
  static constexpr bool preserves_rank_order = false;

  // Ranks in the halving and doubling (P'), and how many fold into a partner (E).
  struct folding {
    int ranks_in_steps = 1, folded = 0;
    explicit folding(int size) {
      while (ranks_in_steps * 2 <= size) ranks_in_steps *= 2;
      folded = size - ranks_in_steps;
    }
    // The rank's number among the P' (-1: it folds into rank + 1).
    int new_rank(int rank) const {
      if (rank >= 2 * folded) return rank - folded;
      return rank % 2 ? rank / 2 : -1;
    }
    // The old ranks new rank n stands for: [first_old(n), first_old(n + 1)).
    int first_old(int n) const { return n <= folded ? 2 * n : n + folded; }
    // The old rank that takes part in the steps for new rank n.
    int old_rank(int n) const { return first_old(n + 1) - 1; }
    int steps() const {
      int s = 0;
      while ((1 << s) < ranks_in_steps) ++s;
      return s;
    }
  };

  COLLECTIVES_DECL static schedule plan(kind::all_reduce, const plan_request& req);
  // reduce_scatter and all_gather: their v-forms with every count alike (plan_of).
  COLLECTIVES_DECL static schedule plan(kind::reduce_scatterv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::all_gatherv, const plan_request& req);

  // Messages on the critical path of all_reduce: 2 log2(P') steps, 2 more to fold.
  static int all_reduce_steps(int size) {
    const folding f(size);
    return 2 * f.steps() + (f.folded ? 2 : 0);
  }

  // Estimated seconds (alpha-beta, as the other algorithms): each step's latency and
  // block over the link it crosses, the fold's two whole buffers included. Where the
  // call knows the hosts, a step whose partners all share a host runs at the on-host
  // figures: the halving's last steps and the doubling's first, between near ranks.
  static double cost(kind::all_reduce, const plan_request& r) {
    const folding f(r.size);
    const double bytes = plan::bytes_of(r);
    double seconds = f.folded ? 2 * step_s(fold_link(r, f), bytes) : 0;
    double block = bytes;
    for (int distance = f.ranks_in_steps / 2; distance >= 1; distance /= 2) {
      block /= 2;
      seconds += 2 * step_s(step_link(r, f, distance), block);  // the halving step and the doubling's twin
    }
    return seconds;
  }
  static double cost(kind::reduce_scatterv, const plan_request& r) { return one_phase_cost(r); }
  static double cost(kind::all_gatherv, const plan_request& r) { return one_phase_cost(r); }

 private:
  static double step_s(const link_costs& c, double bytes) {
    return c.latency_s + c.per_message_s + bytes * c.seconds_per_byte;
  }

  // The link of the step between new ranks `distance` apart: the on-host one where the
  // call knows the hosts and every rank's partner shares its host, else the call's.
  static const link_costs& step_link(const plan_request& r, const folding& f, int distance) {
    if (r.hosts.size() != std::size_t(r.size)) return r.costs;
    for (int n = 0; n < f.ranks_in_steps; ++n)
      if (r.hosts[std::size_t(f.old_rank(n))] != r.hosts[std::size_t(f.old_rank(n ^ distance))]) return r.costs;
    return r.on_host_costs;
  }
  // The fold's link: the on-host one where every folding pair shares a host.
  static const link_costs& fold_link(const plan_request& r, const folding& f) {
    if (r.hosts.size() != std::size_t(r.size)) return r.costs;
    for (int e = 0; e < f.folded; ++e)
      if (r.hosts[std::size_t(2 * e)] != r.hosts[std::size_t(2 * e + 1)]) return r.costs;
    return r.on_host_costs;
  }

  // One phase (halving or doubling) of the P parts: log2(P') steps, whose blocks add up
  // to (P'-1)/P' of the buffer, plus the fold's whole buffer and the part handed back.
  static double one_phase_cost(const plan_request& r) {
    const folding f(r.size);
    const double part = plan::largest_part_bytes(r), total = part * r.size;
    const link_costs& fold = fold_link(r, f);
    double seconds = f.folded ? step_s(fold, total) + step_s(fold, part) : 0;
    double block = total;
    for (int distance = f.ranks_in_steps / 2; distance >= 1; distance /= 2) {
      block /= 2;
      seconds += step_s(step_link(r, f, distance), block);
    }
    return seconds;
  }

  // Blocks [first, last) of a buffer cut at `bounds`.
  static region block(region whole, const std::vector<std::size_t>& bounds, int first, int last) {
    return {whole.buffer, whole.offset + bounds[std::size_t(first)], bounds[std::size_t(last)] - bounds[std::size_t(first)]};
  }

  // The blocks of the halving when the buffer holds one part per old rank: new rank n's
  // block is the parts of the old ranks it stands for.
  static std::vector<std::size_t> bounds_of_parts(const folding& f, const std::vector<std::size_t>& displ) {
    std::vector<std::size_t> bounds(std::size_t(f.ranks_in_steps) + 1);
    for (int n = 0; n <= f.ranks_in_steps; ++n) bounds[std::size_t(n)] = displ[std::size_t(f.first_old(n))];
    return bounds;
  }

  static schedule reduce_scatter(const plan_request& req, std::span<const std::size_t> counts) {
    const folding f(req.size);
    const auto displ = plan::displacements(counts);
    const std::size_t total = displ.back(), mine = counts[std::size_t(req.rank)];
    const region in{buffer_id::input, 0, total}, out{buffer_id::output, 0, mine};

    builder b(req, f, total, {.shift = -std::ptrdiff_t(displ[std::size_t(req.rank)]), .output_count = mine});
    const int n = f.new_rank(req.rank);
    if (n < 0) {
      b.send(req.rank + 1, b.fold_phase(), in);
      b.recv(req.rank + 1, b.unfold_phase(), out);
      return std::move(b.s);
    }
    const region acc = b.s.reserve_scratch(total);
    const auto bounds = bounds_of_parts(f, displ);
    b.fold_in_and_halve(acc, in, bounds, n);
    b.finalize(block(acc, bounds, n, n + 1));
    auto part_of = [&](int old) { return region{acc.buffer, acc.offset + displ[std::size_t(old)], counts[std::size_t(old)]}; };
    b.copy(out, part_of(req.rank));
    if (req.rank < 2 * f.folded) b.send(req.rank - 1, b.unfold_phase(), part_of(req.rank - 1));
    return std::move(b.s);
  }

  static schedule all_gather(const plan_request& req, std::span<const std::size_t> counts) {
    const folding f(req.size);
    const auto displ = plan::displacements(counts);
    const std::size_t total = displ.back();
    const region in{buffer_id::input, 0, counts[std::size_t(req.rank)]}, out{buffer_id::output, 0, total};
    auto part_of = [&](int old) { return region{buffer_id::output, displ[std::size_t(old)], counts[std::size_t(old)]}; };

    builder b(req, f, total, {.shift = std::ptrdiff_t(displ[std::size_t(req.rank)]), .output_count = total});
    const int n = f.new_rank(req.rank);
    b.copy(part_of(req.rank), in);
    if (n < 0) {
      b.send(req.rank + 1, b.fold_phase(), in);
      b.recv(req.rank + 1, b.unfold_phase(), out);
      return std::move(b.s);
    }
    if (req.rank < 2 * f.folded) b.recv(req.rank - 1, b.fold_phase(), part_of(req.rank - 1));
    b.double_up(out, bounds_of_parts(f, displ), n);
    if (req.rank < 2 * f.folded) b.send(req.rank - 1, b.unfold_phase(), out);
    return std::move(b.s);
  }

  // Builds one rank's schedule: each message cut into slices, each operation made to
  // wait for the earlier ones that touch the same elements (so a block is sent once it
  // is reduced, and a receive never overwrites what a send still reads).
  class builder {
   public:
    schedule s;

    // Where the input lies in the output in an in-place call: input element i is output
    // element i + shift (the in-place layouts of docs/collectives.md).
    struct in_place_layout {
      std::ptrdiff_t shift = 0;
      std::size_t output_count = 0;
    };

    // `largest`: the elements of the largest message. Every read of the input counts as
    // a read of the output elements it may be, so that no write there overtakes it.
    builder(const plan_request& req, const folding& f, std::size_t largest, in_place_layout layout)
        : req_(req), f_(f), slice_(plan::slice_elements(req)), stride_(plan::slice_count(largest, slice_)),
          layout_(layout) {}

    // Tag phases: the fold, each halving step, each doubling step, the unfold.
    std::uint32_t fold_phase() const { return 0; }
    std::uint32_t halving_phase(int step) const { return 1 + std::uint32_t(step); }
    std::uint32_t doubling_phase(int step) const { return 1 + std::uint32_t(f_.steps() + step); }
    std::uint32_t unfold_phase() const { return 1 + 2 * std::uint32_t(f_.steps()); }

    void send(int peer, std::uint32_t phase, region src) {
      for (std::size_t k = 0; k < plan::slice_count(src.count, slice_); ++k) {
        const region part = plan::slice_of(src, slice_, k);
        read(part, s.add({.kind = op_kind::send, .peer = peer, .tag = tag(phase, k), .src = part}, after_writes(part)));
      }
    }
    void recv(int peer, std::uint32_t phase, region dst) {
      for (std::size_t k = 0; k < plan::slice_count(dst.count, slice_); ++k) {
        const region part = plan::slice_of(dst, slice_, k);
        touched(part, s.add({.kind = op_kind::recv, .peer = peer, .tag = tag(phase, k), .dst = part}, after_all(part)), true);
      }
    }
    // Combines what `peer` sends into `dst`, the lower rank's part on the left.
    void recv_reduce(int peer, std::uint32_t phase, region dst) {
      const auto order = peer < req_.rank ? operand_order::received_first : operand_order::received_last;
      for (std::size_t k = 0; k < plan::slice_count(dst.count, slice_); ++k) {
        const region part = plan::slice_of(dst, slice_, k);
        const region landing{buffer_id::staging, s.staging_count, part.count};
        s.staging_count += part.count;
        touched(part,
                s.add({.kind = op_kind::recv_reduce, .peer = peer, .tag = tag(phase, k), .dst = part, .src = landing,
                       .order = order},
                      after_all(part)),
                true);
      }
    }
    // In slices, so that what waits for a part of `dst` waits for that part alone.
    void copy(region dst, region src) {
      for (std::size_t k = 0; dst.count && k < plan::slice_count(dst.count, slice_); ++k) {
        const region to = plan::slice_of(dst, slice_, k), from = plan::slice_of(src, slice_, k);
        auto waits = after_all(to);
        for (op_id id : after_writes(from)) waits.push_back(id);
        const op_id id = s.add({.kind = op_kind::copy, .dst = to, .src = from}, waits);
        read(from, id);
        touched(to, id, true);
      }
    }
    void finalize(region dst) {
      if (!req_.finalize) return;
      for (std::size_t k = 0; k < plan::slice_count(dst.count, slice_); ++k) {
        const region part = plan::slice_of(dst, slice_, k);
        touched(part, s.add({.kind = op_kind::finalize, .dst = part}, after_all(part)), true);
      }
    }

    // Recursive halving of `buf` (cut at `bounds` into P' blocks) by new rank n:
    // partners differ first in the highest bit; each keeps the half of its blocks that
    // holds its own block, and ends with block n reduced. With `initial` (this rank's
    // part, laid out as `buf`), buf is not filled yet: the first step sends straight
    // from `initial` and copies only the half it keeps.
    void halve(region buf, const std::vector<std::size_t>& bounds, int n, region initial = {}) {
      const bool filled = initial.count == 0 && buf.count != 0;
      auto in_initial = [&](region r) { return region{initial.buffer, initial.offset + (r.offset - buf.offset), r.count}; };
      int lo = 0, hi = f_.ranks_in_steps, step = 0;
      if (!filled && hi == 1) copy(buf, in_initial(buf));
      for (int mask = f_.ranks_in_steps / 2; mask >= 1; mask /= 2, ++step) {
        const int mid = lo + (hi - lo) / 2, peer = f_.old_rank(n ^ mask);
        const bool upper = n & mask;
        const region give = block(buf, bounds, upper ? lo : mid, upper ? mid : hi);
        const region keep = block(buf, bounds, upper ? mid : lo, upper ? hi : mid);
        const bool first = step == 0 && !filled;
        send(peer, halving_phase(step), first ? in_initial(give) : give);
        if (first) copy(keep, in_initial(keep));
        recv_reduce(peer, halving_phase(step), keep);
        (upper ? lo : hi) = mid;
      }
    }

    // This rank's `input` (laid out as `buf`) reduced into `buf` by the halving; a rank
    // that takes a fold first combines its partner's whole input into its own there.
    void fold_in_and_halve(region buf, region input, const std::vector<std::size_t>& bounds, int n) {
      if (req_.rank < 2 * f_.folded) {
        copy(buf, input);
        recv_reduce(req_.rank - 1, fold_phase(), buf);
        halve(buf, bounds, n);
      } else {
        halve(buf, bounds, n, input);
      }
    }

    // Recursive doubling of `buf` by new rank n, which holds block n: partners differ
    // first in the lowest bit and swap all they hold.
    void double_up(region buf, const std::vector<std::size_t>& bounds, int n) {
      int step = 0;
      for (int mask = 1; mask < f_.ranks_in_steps; mask *= 2, ++step) {
        const int mine = n & ~(mask - 1), theirs = mine ^ mask, peer = f_.old_rank(n ^ mask);
        send(peer, doubling_phase(step), block(buf, bounds, mine, mine + mask));
        recv(peer, doubling_phase(step), block(buf, bounds, theirs, theirs + mask));
      }
    }

   private:
    struct touch {
      region where;
      op_id by;
      bool writes;
    };

    static bool overlap(region a, region b) {
      return a.buffer == b.buffer && a.count && b.count && a.offset < b.offset + b.count && b.offset < a.offset + a.count;
    }

    // The earlier operations that a read of `r` must wait for (those that wrote there),
    // and those that a write must wait for (those that read there too).
    std::vector<op_id> after_writes(region r) const { return touching(r, true); }
    std::vector<op_id> after_all(region r) const { return touching(r, false); }
    std::vector<op_id> touching(region r, bool writes_only) const {
      std::vector<op_id> ids;
      for (const auto& t : touches_)
        if ((t.writes || !writes_only) && overlap(t.where, r)) ids.push_back(t.by);
      return ids;
    }

    // Records a read of `r`, and of the output elements an input region may be.
    void read(region r, op_id by) {
      touched(r, by, false);
      if (r.buffer != buffer_id::input) return;
      const auto count = std::ptrdiff_t(layout_.output_count);
      const auto begin = std::max<std::ptrdiff_t>(std::ptrdiff_t(r.offset) + layout_.shift, 0);
      const auto end = std::min<std::ptrdiff_t>(std::ptrdiff_t(r.offset + r.count) + layout_.shift, count);
      if (begin < end) touched({buffer_id::output, std::size_t(begin), std::size_t(end - begin)}, by, false);
    }

    // Records an operation; a write over whole earlier records replaces them, since
    // anything later that meets them meets this write, which waited for them.
    void touched(region where, op_id by, bool writes) {
      if (writes)
        std::erase_if(touches_, [&](const touch& t) {
          return t.where.buffer == where.buffer && t.where.offset >= where.offset &&
                 t.where.offset + t.where.count <= where.offset + where.count;
        });
      touches_.push_back({where, by, writes});
    }

    std::uint32_t tag(std::uint32_t phase, std::size_t slice) const {
      return static_cast<std::uint32_t>(phase * stride_ + slice);
    }

    const plan_request& req_;
    folding f_;
    std::size_t slice_, stride_;
    in_place_layout layout_;
    std::vector<touch> touches_;
  };
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "halving_doubling.ipp"
#endif
