// Halving-doubling's plans (halving_doubling.hpp): inline in header-only use, compiled
// once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "halving_doubling.hpp"

namespace collectives {

schedule halving_doubling::plan(kind::all_reduce, const plan_request& req) {
  const folding f(req.size);
  // The blocks of the halving: the buffer cut evenly among the P' ranks.
  const auto bounds = plan::displacements(plan::even_chunk_counts(req.count, f.ranks_in_steps));
  const region in{buffer_id::input, 0, req.count}, out{buffer_id::output, 0, req.count};

  builder b(req, f, req.count, {.shift = 0, .output_count = req.count});
  const int n = f.new_rank(req.rank);
  if (n < 0) {  // folds: hands its input over and gets the result back
    b.send(req.rank + 1, b.fold_phase(), in);
    b.recv(req.rank + 1, b.unfold_phase(), out);
    return std::move(b.s);
  }
  b.fold_in_and_halve(out, in, bounds, n);
  b.finalize(block(out, bounds, n, n + 1));
  b.double_up(out, bounds, n);
  if (req.rank < 2 * f.folded) b.send(req.rank - 1, b.unfold_phase(), out);
  return std::move(b.s);
}

schedule halving_doubling::plan(kind::reduce_scatterv, const plan_request& req) {
  return reduce_scatter(req, req.counts);
}

schedule halving_doubling::plan(kind::all_gatherv, const plan_request& req) {
  return all_gather(req, req.counts);
}

}  // namespace collectives
