// The double binary tree's plans (tree.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "tree.hpp"

namespace collectives {

std::vector<tree_links> double_binary_tree::links(int size, int tree) {
  std::vector<tree_links> out(static_cast<std::size_t>(size));
  build(out, 0, size - 1, -1, 1 + tree);
  return out;
}

schedule double_binary_tree::plan(kind::all_reduce, const plan_request& req) {
  schedule s;
  for (const auto& half : halves(req)) {
    const tree_links me = links_of(req.rank, req.size, half.tree);
    const region in{buffer_id::input, half.offset, half.count}, out{buffer_id::output, half.offset, half.count};
    const bool leaf = me.left < 0 && me.right < 0;
    // A leaf sends its input as it is and only ever receives the result.
    const op_id init = leaf && me.parent >= 0 ? no_dependency : s.copy(out, in);
    for (std::size_t k = 0; k < half.slices; ++k) {
      const std::uint32_t g = half.first_slice + static_cast<std::uint32_t>(k);
      const region part = plan::slice_of(out, half.slice, k);
      const op_id combined = reduce_children(s, me, part, g, init);
      op_id ready;  // this slice holds the final result
      if (me.parent >= 0) {
        const op_id up = s.send(me.parent, up_tag(g), leaf ? plan::slice_of(in, half.slice, k) : part, {combined});
        ready = s.recv(me.parent, down_tag(g), part, {up});
      } else {
        ready = req.finalize ? s.finalize(part, {combined}) : combined;
      }
      send_to_children(s, me, part, down_tag(g), ready);
    }
  }
  return s;
}

schedule double_binary_tree::plan(kind::reduce, const plan_request& req) {
  schedule s;
  const bool is_root = req.rank == req.root;
  for (const auto& half : halves(req)) {
    const tree_links me = links_of(req.rank, req.size, half.tree);
    const region in{buffer_id::input, half.offset, half.count};
    const bool leaf = me.left < 0 && me.right < 0, tree_root = me.parent < 0;
    // Where this rank's partial result grows: the output on the root, nowhere on a
    // leaf (it sends its input), scratch elsewhere (other ranks' outputs stay untouched).
    const region acc = is_root ? region{buffer_id::output, half.offset, half.count}
                       : leaf  ? in
                               : s.reserve_scratch(half.count);
    const op_id init = leaf && !is_root ? no_dependency : s.copy(acc, in);
    for (std::size_t k = 0; k < half.slices; ++k) {
      const std::uint32_t g = half.first_slice + static_cast<std::uint32_t>(k);
      const region part = plan::slice_of(acc, half.slice, k);
      const op_id combined = reduce_children(s, me, part, g, init);
      if (!tree_root) {
        const op_id up = s.send(me.parent, up_tag(g), part, {combined});
        if (is_root) s.recv(half.root, down_tag(g), part, {up});  // the finished half comes back
        continue;
      }
      const op_id done = req.finalize ? s.finalize(part, {combined}) : combined;
      if (!is_root) s.send(req.root, down_tag(g), part, {done});
    }
  }
  return s;
}

schedule double_binary_tree::plan(kind::broadcast, const plan_request& req) {
  schedule s;
  const int p = req.size;
  const region in{buffer_id::input, 0, req.count}, out{buffer_id::output, 0, req.count};
  if (req.rank == req.root) s.copy(out, in);
  for (const auto& half : halves(req)) {
    // Rank r plays position (r - root + tree root) of the tree.
    auto rank_at = [&](int position) { return position < 0 ? -1 : plan::mod(position - half.root + req.root, p); };
    const tree_links pos = links_of(plan::mod(req.rank - req.root + half.root, p), p, half.tree);
    const tree_links me{rank_at(pos.parent), rank_at(pos.left), rank_at(pos.right)};
    const region from = req.rank == req.root ? region{buffer_id::input, half.offset, half.count}
                                             : region{buffer_id::output, half.offset, half.count};
    for (std::size_t k = 0; k < half.slices; ++k) {
      const std::uint32_t g = half.first_slice + static_cast<std::uint32_t>(k);
      const region part = plan::slice_of(from, half.slice, k);
      const op_id ready = me.parent >= 0 ? s.recv(me.parent, down_tag(g), part) : no_dependency;
      send_to_children(s, me, part, down_tag(g), ready);
    }
  }
  return s;
}

}  // namespace collectives
