// Double binary tree: the data is cut in two halves and each half is reduced up, and
// broadcast down, its own binary tree. Rank r sits at position r+1 of tree 0 and r+2
// of tree 1, and a position's height is the number of trailing zero bits, so odd
// positions are leaves: every rank is a leaf in one tree and an inner node in the
// other, and the two halves share the work evenly. Latency grows with log2(P);
// slices pipeline the levels.
//
// Both trees are in-order trees over the rank numbers: every subtree covers a
// contiguous range of ranks, so a node combines (left subtree) op (itself) op
// (right subtree) and the result is always x0 op x1 op ... op x(P-1). Non-commutative
// ops are therefore fine.
#pragma once

#include <vector>

#include "../concepts/algorithm.hpp"
#include "../config.hpp"
#include "schedule.hpp"

namespace collectives {

struct tree_links {
  int parent = -1, left = -1, right = -1;  // -1: none
};

struct double_binary_tree {
  static constexpr const char* name = "double_binary_tree";
  static constexpr bool preserves_rank_order = true;

  // The links of every rank in tree 0 or tree 1.
  COLLECTIVES_DECL static std::vector<tree_links> links(int size, int tree);
  // One position's, found by walking down from the root: a plan needs only its own rank's,
  // and building every rank's made planning all ranks of a large group (a simulated
  // cluster's) take time quadratic in P.
  static tree_links links_of(int position, int size, int tree) {
    const int shift = 1 + tree;
    int lo = 0, hi = size - 1, parent = -1;
    for (;;) {
      const int mid = top(lo, hi, shift);
      if (mid == position)
        return {parent, lo <= mid - 1 ? top(lo, mid - 1, shift) : -1, mid + 1 <= hi ? top(mid + 1, hi, shift) : -1};
      parent = mid;
      if (position < mid) hi = mid - 1;
      else lo = mid + 1;
    }
  }
  static int root_of(int size, int tree) { return top(0, size - 1, 1 + tree); }

  // Levels of tree 0: ceil(log2(P + 1)); tree 1 has at most one more.
  static int depth(int size) {
    int levels = 0;
    while ((1 << levels) < size + 1) ++levels;
    return levels;
  }

  COLLECTIVES_DECL static schedule plan(kind::all_reduce, const plan_request& req);

  // Each half is reduced up its tree; a tree root other than `root` forwards it.
  COLLECTIVES_DECL static schedule plan(kind::reduce, const plan_request& req);

  // Each half goes down its tree, relabelled so that `root` sits at the tree's root.
  COLLECTIVES_DECL static schedule plan(kind::broadcast, const plan_request& req);

  // Estimated seconds for one call (alpha-beta model; automatic picks the cheapest).
  static double cost(kind::all_reduce, const plan_request& r) {
    // Up and down each level; an inner node sends and receives the whole half twice.
    return 2.0 * depth(r.size) * (r.costs.latency_s + r.costs.per_message_s) +
           2.0 * plan::bytes_of(r) * r.costs.seconds_per_byte;
  }
  // broadcast and reduce: a pipelined tree.
  static double cost(kind::broadcast, const plan_request& r) { return one_way_cost(r); }
  static double cost(kind::reduce, const plan_request& r) { return one_way_cost(r); }

 private:
  static double one_way_cost(const plan_request& r) {
    return depth(r.size) * (r.costs.latency_s + r.costs.per_message_s) + plan::bytes_of(r) * r.costs.seconds_per_byte;
  }

  struct half_plan {
    std::size_t offset, count, slice, slices;
    std::uint32_t first_slice;  // global slice number of its first slice, for tags
    int root;
    int tree;  // 0 or 1
  };

  static std::vector<half_plan> halves(const plan_request& req) {
    const std::size_t slice = plan::slice_elements(req);
    const auto first = plan::even_chunk(req.count, 2, 0), second = plan::even_chunk(req.count, 2, 1);
    const std::size_t first_slices = plan::slice_count(first.count, slice);
    std::vector<half_plan> out;
    out.push_back({first.offset, first.count, slice, first_slices, 0, root_of(req.size, 0), 0});
    out.push_back({second.offset, second.count, slice, plan::slice_count(second.count, slice),
                   static_cast<std::uint32_t>(first_slices), root_of(req.size, 1), 1});
    return out;
  }

  // The rank in [lo, hi] whose position (rank + shift) has the most trailing zero
  // bits: the root of that range's subtree.
  static int top(int lo, int hi, int shift) {
    for (int bit = 30; bit > 0; --bit) {
      const int position = ((hi + shift) >> bit) << bit;
      if (position >= lo + shift) return position - shift;
    }
    return hi;  // a range of one odd position
  }

  static void build(std::vector<tree_links>& out, int lo, int hi, int parent, int shift) {
    if (lo > hi) return;
    const int mid = top(lo, hi, shift);
    out[std::size_t(mid)] = {parent, lo <= mid - 1 ? top(lo, mid - 1, shift) : -1,
                             mid + 1 <= hi ? top(mid + 1, hi, shift) : -1};
    build(out, lo, mid - 1, mid, shift);
    build(out, mid + 1, hi, mid, shift);
  }

  // Combines the children's partial results into `part` in rank order: the left
  // subtree holds lower ranks, the right one higher ranks.
  static op_id reduce_children(schedule& s, const tree_links& me, region part, std::uint32_t g, op_id init) {
    op_id last = init;
    if (me.left >= 0) last = s.recv_reduce(me.left, up_tag(g), part, operand_order::received_first, {last});
    if (me.right >= 0) last = s.recv_reduce(me.right, up_tag(g), part, operand_order::received_last, {last});
    return last;
  }

  static void send_to_children(schedule& s, const tree_links& me, region part, std::uint32_t tag, op_id ready) {
    if (me.left >= 0) s.send(me.left, tag, part, {ready});
    if (me.right >= 0) s.send(me.right, tag, part, {ready});
  }

  static std::uint32_t up_tag(std::uint32_t g) { return g; }
  static std::uint32_t down_tag(std::uint32_t g) { return g | 0x8000'0000u; }
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "tree.ipp"
#endif
