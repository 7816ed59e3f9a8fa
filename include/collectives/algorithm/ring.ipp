// The ring's plans (ring.hpp): inline in header-only use, compiled once into
// collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "ring.hpp"

namespace collectives {

schedule ring::plan(kind::all_reduce, const plan_request& req) {
  const auto counts = plan::even_chunk_counts(req.count, req.size);
  const auto displ = plan::displacements(counts);
  auto in_output = [&](int c) { return region{buffer_id::output, displ[std::size_t(c)], counts[std::size_t(c)]}; };
  auto in_input = [&](int c) { return region{buffer_id::input, displ[std::size_t(c)], counts[std::size_t(c)]}; };

  schedule s;
  const auto rs = reduce_scatter_steps(s, req, counts, in_output, in_input);
  all_gather_steps(s, req, counts, in_output, finalize_own(s, req, in_output(req.rank), rs.own_ready), rs.sends,
                   /*first_tag=*/rs.tags_used, rs.receives);
  return s;
}

schedule ring::plan(kind::reduce_scatterv, const plan_request& req) {
  return reduce_scatter_to_output(req, req.counts);
}

schedule ring::plan(kind::all_gatherv, const plan_request& req) {
  return all_gather_from_input(req, req.counts);
}

schedule ring::plan(kind::broadcast, const plan_request& req) {
  const int p = req.size, r = req.rank, position = plan::mod(r - req.root, p);
  const int next = (r + 1) % p, prev = plan::mod(r - 1, p);
  const bool last = position == p - 1;
  const std::size_t slice = plan::slice_elements(req), slices = plan::slice_count(req.count, slice);
  const region out{buffer_id::output, 0, req.count}, in{buffer_id::input, 0, req.count};
  schedule s;
  if (position == 0) s.copy(out, in);
  for (std::size_t k = 0; k < slices; ++k) {
    const auto tag = static_cast<std::uint32_t>(k);
    if (position == 0) {
      if (!last) s.send(next, tag, plan::slice_of(in, slice, k));
    } else {
      const op_id got = s.recv(prev, tag, plan::slice_of(out, slice, k));
      if (!last) s.send(next, tag, plan::slice_of(out, slice, k), {got});
    }
  }
  return s;
}

schedule ring::plan(kind::reduce, const plan_request& req) {
  const int p = req.size, r = req.rank, position = plan::mod(r - req.root - 1, p);
  const int next = (r + 1) % p, prev = plan::mod(r - 1, p);
  const std::size_t slice = plan::slice_elements(req), slices = plan::slice_count(req.count, slice);
  const region in{buffer_id::input, 0, req.count};
  schedule s;
  if (r == req.root) {
    const region out{buffer_id::output, 0, req.count};
    const op_id alone = p == 1 ? s.copy(out, in) : no_dependency;
    for (std::size_t k = 0; k < slices; ++k) {
      const region part = plan::slice_of(out, slice, k);
      const op_id got = p > 1 ? s.recv_reduce_onto(prev, static_cast<std::uint32_t>(k), part, plan::slice_of(in, slice, k),
                                                   operand_order::received_last)
                              : alone;
      if (req.finalize) s.finalize(part, {got});
    }
  } else if (position == 0) {
    for (std::size_t k = 0; k < slices; ++k) s.send(next, static_cast<std::uint32_t>(k), plan::slice_of(in, slice, k));
  } else {
    const region acc = s.reserve_scratch(req.count);
    for (std::size_t k = 0; k < slices; ++k) {
      const region part = plan::slice_of(acc, slice, k);
      const auto tag = static_cast<std::uint32_t>(k);
      const op_id got = s.recv_reduce_onto(prev, tag, part, plan::slice_of(in, slice, k), operand_order::received_last);
      s.send(next, tag, part, {got});
    }
  }
  return s;
}

std::vector<op_id> ring::finalize_own(schedule& s, const plan_request& req, region own, std::vector<op_id> ready) {
  if (!req.finalize) return ready;
  const std::size_t slice = plan::slice_elements(req);
  for (std::size_t k = 0; k < ready.size(); ++k) ready[k] = s.finalize(plan::slice_of(own, slice, k), {ready[k]});
  return ready;
}

schedule ring::reduce_scatter_to_output(const plan_request& req, std::span<const std::size_t> counts) {
  const auto displ = plan::displacements(counts);
  const int r = req.rank;
  schedule s;
  // Chunks other than the own one are accumulated in scratch, the own one in output.
  std::vector<region> acc(counts.size());
  for (std::size_t k = 0; k < counts.size(); ++k) {  // from the own chunk on, as reduce_scatter_steps
    const std::size_t c = (std::size_t(r) + k) % counts.size();
    if (int(c) == r) acc[c] = {buffer_id::output, 0, counts[c]};
    else if (int(c) != plan::mod(r - 1, req.size)) acc[c] = s.reserve_scratch(counts[c]);  // r-1 is sent, never accumulated
  }
  auto initial = [&](int c) { return region{buffer_id::input, displ[std::size_t(c)], counts[std::size_t(c)]}; };
  const auto rs = reduce_scatter_steps(s, req, counts, [&](int c) { return acc[std::size_t(c)]; }, initial);
  finalize_own(s, req, acc[std::size_t(r)], rs.own_ready);
  return s;
}

schedule ring::all_gather_from_input(const plan_request& req, std::span<const std::size_t> counts) {
  const auto displ = plan::displacements(counts);
  const int r = req.rank;
  auto out = [&](int c) { return region{buffer_id::output, displ[std::size_t(c)], counts[std::size_t(c)]}; };
  schedule s;
  const op_id own = s.copy(out(r), {buffer_id::input, 0, counts[std::size_t(r)]});
  const std::size_t own_slices = plan::slice_count(counts[std::size_t(r)], plan::slice_elements(req));
  all_gather_steps(s, req, counts, out, std::vector<op_id>(own_slices, own), {}, 0);
  return s;
}

}  // namespace collectives
