// direct's plans (direct.hpp): inline in header-only use, compiled once into
// collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "direct.hpp"

namespace collectives {

schedule direct::plan(kind::broadcast, const plan_request& req) {
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

schedule direct::plan(kind::reduce, const plan_request& req) {
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

schedule direct::plan(kind::all_reduce, const plan_request& req) {
  return runs_in_one_round(req) ? all_reduce_in_one_round(req) : all_reduce_in_two_rounds(req);
}

schedule direct::all_reduce_in_one_round(const plan_request& req) {
  const int p = req.size, r = req.rank;
  const std::size_t n = req.count, others = std::size_t(p - 1);
  if (p == 2) {  // one combine, x_0 op x_1 on both ranks, straight from the wire
    schedule s;
    const region input{buffer_id::input, 0, n}, acc = s.reserve_scratch(n), out{buffer_id::output, 0, n};
    const int peer = 1 - r;
    const op_id sent = s.send(peer, 0, input);
    const op_id got = s.recv_reduce_onto(peer, 0, acc, input, peer < r ? operand_order::received_first : operand_order::received_last);
    finish(s, req, out, s.copy(out, acc, {sent, got}));
    return s;
  }
  auto chunk_begin = [&](int c) { return plan::even_chunk(n, p, c).offset; };  // chunk_begin(p) == n
  auto elements = [](region whole, std::size_t begin, std::size_t end) {
    return region{whole.buffer, whole.offset + begin, end - begin};
  };
  schedule s;
  // Reserved so that planning a small call allocates each vector once: 2(P-1)
  // messages; a chain of at most P copies and 2(P-1) reduces, each after two steps;
  // the output copy after P-1 sends and the chain; finalize after the output copy.
  const std::size_t chain_steps = others + 1 + 2 * others;
  s.ops.reserve(2 * others + chain_steps + 2);
  s.deps.reserve(2 * chain_steps + others + 1 + 1);
  // Scratch: the accumulator, then one slot per other rank, in rank order.
  const region input{buffer_id::input, 0, n}, acc = s.reserve_scratch(n);
  s.reserve_scratch(others * n);
  auto part = [&](int q) {  // rank q's whole input, as this rank has it
    return q == r ? input : region{buffer_id::scratch, n * std::size_t(q < r ? q + 1 : q), n};
  };
  std::vector<op_id> arrived(std::size_t(p), no_dependency);  // [q]: the receive of part(q)
  std::vector<op_id> output_gate;                     // every send, then the last combine
  output_gate.reserve(others + 1);
  for (int k = 1; k < p; ++k) {
    const int q = peer_after(r, k, p);
    arrived[std::size_t(q)] = s.recv(q, 0, part(q));
    output_gate.push_back(s.send(q, 0, input));
  }
  // One chain of local steps, each after the part it reads has arrived. Empty ranges
  // are left out (at small counts most chunks are empty).
  op_id last = no_dependency;
  auto combine = [&](int q, std::size_t begin, std::size_t end, operand_order order) {
    if (begin < end)
      last = s.reduce(elements(acc, begin, end), elements(part(q), begin, end), order, {last, arrived[std::size_t(q)]});
  };
  for (int c = 0; c < p; ++c)  // chunk c starts from its owner's part
    if (chunk_begin(c) < chunk_begin(c + 1))
      last = s.copy(elements(acc, chunk_begin(c), chunk_begin(c + 1)),
                    elements(part(c), chunk_begin(c), chunk_begin(c + 1)), {last, arrived[std::size_t(c)]});
  for (int q = p - 2; q >= 0; --q) combine(q, chunk_begin(q + 1), n, operand_order::received_first);
  for (int q = 1; q < p; ++q) combine(q, 0, chunk_begin(q), operand_order::received_last);
  output_gate.push_back(last);
  const region out{buffer_id::output, 0, n};
  const op_id written = s.add({.kind = op_kind::copy, .dst = out, .src = acc}, output_gate);
  finish(s, req, out, written);
  return s;
}

schedule direct::all_reduce_in_two_rounds(const plan_request& req) {
  const auto counts = plan::even_chunk_counts(req.count, req.size);
  const auto displ = plan::displacements(counts);
  auto chunk = [&](buffer_id b, int c) { return region{b, displ[std::size_t(c)], counts[std::size_t(c)]}; };
  const int r = req.rank;
  schedule s;
  // Reduce-scatter: rank c gathers and combines chunk c.
  std::vector<op_id> scattered(std::size_t(req.size), no_dependency);
  for (int k = 1; k < req.size; ++k) {
    const int q = peer_after(r, k, req.size);
    scattered[std::size_t(q)] = s.send(q, 0, chunk(buffer_id::input, q));
  }
  const op_id init = s.copy(chunk(buffer_id::output, r), chunk(buffer_id::input, r));
  const auto parts = receive_parts(s, req, [&](int) { return counts[std::size_t(r)]; }, 0);
  const op_id own = finish(s, req, chunk(buffer_id::output, r),
                           combine_in_rank_order(s, r, chunk(buffer_id::output, r), parts, init));
  // All-gather: every owner sends its finished chunk to everyone. A receive may
  // overwrite its chunk only after the input there was sent (in-place calls).
  for (int k = 1; k < req.size; ++k) {
    const int q = peer_after(r, k, req.size);
    s.send(q, 1, chunk(buffer_id::output, r), {own});
    s.recv(q, 1, chunk(buffer_id::output, q), {scattered[std::size_t(q)]});
  }
  return s;
}

schedule direct::plan(kind::reduce_scatterv, const plan_request& req) {
  return reduce_scatter(req, req.counts);
}

schedule direct::plan(kind::all_gatherv, const plan_request& req) {
  return all_gather(req, req.counts);
}

schedule direct::plan(kind::gatherv, const plan_request& req) { return gather(req, req.counts); }

schedule direct::plan(kind::scatterv, const plan_request& req) {
  return scatter(req, req.counts);
}

schedule direct::plan(kind::all_to_allv, const plan_request& req) {
  return all_to_all(req, req.counts, req.recv_counts);
}

schedule direct::plan(kind::barrier, const plan_request& req) {
  schedule s;
  const int p = req.size, r = req.rank;
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  const region signal{buffer_id::input, 0, 1};
  op_id heard = no_dependency;
  for (int k = 0; k < rounds; ++k) {
    const auto tag = static_cast<std::uint32_t>(k);
    s.send((r + (1 << k)) % p, tag, signal, {heard});
    heard = s.recv(plan::mod(r - (1 << k), p), tag, s.reserve_scratch(1), {heard});
  }
  return s;
}

}  // namespace collectives
