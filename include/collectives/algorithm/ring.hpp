// Ring: ranks pass chunks to their right-hand neighbour. Bandwidth-optimal for
// all_reduce (reduce-scatter then all-gather, 2(P-1) steps, each rank sending
// 2(P-1)/P of the data), pipelined in slices so that transfers and reductions of
// consecutive slices overlap. Reduces in ring order, so it takes commutative ops only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "../concepts/algorithm.hpp"
#include "../config.hpp"
#include "schedule.hpp"

namespace collectives {

struct ring {
  static constexpr const char* name = "ring";
  static constexpr bool preserves_rank_order = false;

  COLLECTIVES_DECL static schedule plan(kind::all_reduce, const plan_request& req);
  // reduce_scatter and all_gather: their v-forms with every count alike (plan_of).
  COLLECTIVES_DECL static schedule plan(kind::reduce_scatterv, const plan_request& req);
  COLLECTIVES_DECL static schedule plan(kind::all_gatherv, const plan_request& req);

  // A pipelined chain root -> root+1 -> ... -> root-1.
  COLLECTIVES_DECL static schedule plan(kind::broadcast, const plan_request& req);

  // A pipelined chain root+1 -> root+2 -> ... -> root, each rank adding its part.
  COLLECTIVES_DECL static schedule plan(kind::reduce, const plan_request& req);

  // Every rank's plan is rank 0's turned (concepts/algorithm.hpp) where the parts are
  // all the same size: their slices then match too.
  static bool turns_with_rank(kind::all_reduce, const plan_request& r) { return r.count % std::size_t(r.size) == 0; }
  static bool turns_with_rank(kind::reduce_scatterv, const plan_request& r) { return all_alike(r.counts); }
  static bool turns_with_rank(kind::all_gatherv, const plan_request& r) { return all_alike(r.counts); }

  // Step count of the ring all_reduce, for tests and the cost model.
  static constexpr int all_reduce_steps(int p) { return 2 * (p - 1); }

  // Estimated seconds for one call (alpha-beta model; automatic picks the cheapest):
  // latency of the steps on the critical path plus the bytes the busiest rank moves.
  static double cost(kind::all_reduce, const plan_request& r) {
    const int p = r.size;
    const double share = plan::bytes_of(r) * (p - 1) / p;
    return 2.0 * (p - 1) * (r.costs.latency_s + r.costs.per_message_s) + 2.0 * share * r.costs.seconds_per_byte;
  }
  // broadcast and reduce: a pipelined chain.
  static double cost(kind::broadcast, const plan_request& r) { return chain_cost(r); }
  static double cost(kind::reduce, const plan_request& r) { return chain_cost(r); }
  // all_gatherv and reduce_scatterv: P-1 steps of one part each (the largest part).
  static double cost(kind::all_gatherv, const plan_request& r) { return steps_cost(r); }
  static double cost(kind::reduce_scatterv, const plan_request& r) { return steps_cost(r); }

 private:
  static bool all_alike(std::span<const std::size_t> counts) {
    return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
  }
  static double chain_cost(const plan_request& r) {
    return (r.size - 1) * (r.costs.latency_s + r.costs.per_message_s) + plan::bytes_of(r) * r.costs.seconds_per_byte;
  }
  static double steps_cost(const plan_request& r) {
    return (r.size - 1) * (r.costs.latency_s + r.costs.per_message_s + plan::largest_part_bytes(r) * r.costs.seconds_per_byte);
  }

  // How many steps' receives a rank keeps posted at once: a receive waits for the one
  // of the same slice this many steps before it. Not the whole ring's 2(P - 1), which at
  // thousands of ranks would cost every transport's matching (and a simulated cluster
  // its memory); not one, since a neighbour a step ahead would then meet no receive
  // (over tcp its message is copied aside: 2-rank all_reduce took up to 1.35x as long).
  static constexpr std::size_t steps_posted = 4;

  // [step][slice]: the receives of each step so far (across both phases of all_reduce).
  using receives_by_step = std::vector<std::vector<op_id>>;
  static op_id steps_back(const receives_by_step& posted, std::size_t k) {
    if (posted.size() < steps_posted) return no_dependency;
    const auto& then = posted[posted.size() - steps_posted];
    return k < then.size() ? then[k] : no_dependency;
  }

  struct reduce_scatter_result {
    std::vector<op_id> own_ready;           // per slice: own chunk fully reduced
    std::vector<std::vector<op_id>> sends;  // [step][slice]: last reads of the chunk sent at that step
    receives_by_step receives;
    std::uint32_t tags_used = 0;
  };

  static std::size_t max_slices(std::span<const std::size_t> counts, std::size_t slice) {
    std::size_t m = 1;
    for (auto c : counts) m = std::max(m, plan::slice_count(c, slice));
    return m;
  }

  // Reduce-scatter: at step s rank r sends chunk r-s-1 and receives chunk r-s-2, adding
  // its own part, so that after P-1 steps it holds the reduction of chunk r.
  // `acc(c)` is where chunk c is accumulated, `initial(c)` this rank's part of it. Each
  // chunk but r-1 is received once, onto this rank's part: acc(c) is written there
  // first, with no copy of initial(c) before it (a pass over the buffer saved).
  // Chunk r-1 is sent from initial(r-1) and never accumulated. A rank keeps
  // `steps_posted` steps' receives posted.
  template <class Acc, class Initial>
  static reduce_scatter_result reduce_scatter_steps(schedule& s, const plan_request& req,
                                                    std::span<const std::size_t> counts, Acc acc, Initial initial) {
    const int p = req.size, r = req.rank, next = (r + 1) % p, prev = plan::mod(r - 1, p);
    const std::size_t slice = plan::slice_elements(req), stride = max_slices(counts, slice);
    reduce_scatter_result out;
    std::vector<op_id> received;  // per slice: the chunk received at the previous step
    for (int step = 0; step < p - 1; ++step) {
      const int send_c = plan::mod(r - step - 1, p), recv_c = plan::mod(r - step - 2, p);
      const std::size_t send_slices = plan::slice_count(counts[std::size_t(send_c)], slice);
      const std::size_t recv_slices = plan::slice_count(counts[std::size_t(recv_c)], slice);
      const region from = step == 0 ? initial(send_c) : acc(send_c);
      auto& sent = out.sends.emplace_back();
      for (std::size_t k = 0; k < send_slices; ++k)
        sent.push_back(s.send(next, tag(step, k, stride), plan::slice_of(from, slice, k),
                              {step == 0 ? no_dependency : received[k]}));
      received.assign(recv_slices, no_dependency);
      for (std::size_t k = 0; k < recv_slices; ++k)
        received[k] = s.recv_reduce_onto(prev, tag(step, k, stride), plan::slice_of(acc(recv_c), slice, k),
                                         plan::slice_of(initial(recv_c), slice, k), operand_order::received_last,
                                         {steps_back(out.receives, k)});
      out.receives.push_back(received);
    }
    if (p == 1) received.assign(plan::slice_count(counts[0], slice), s.copy(acc(0), initial(0)));  // nothing to add
    out.own_ready = received;
    out.tags_used = static_cast<std::uint32_t>(static_cast<std::size_t>(p - 1) * stride);
    return out;
  }

  COLLECTIVES_DECL static std::vector<op_id> finalize_own(schedule& s, const plan_request& req, region own, std::vector<op_id> ready);

  // All-gather: at step s rank r sends chunk r-s and receives chunk r-s-1.
  // `own_ready[k]` gates slice k of the own chunk; `clear[s][k]`, where given, is the
  // last read of the chunk a receive at step s overwrites. `posted`: the receives of the
  // steps before (the reduce-scatter's), of which a rank keeps `steps_posted` posted.
  template <class Out>
  static void all_gather_steps(schedule& s, const plan_request& req, std::span<const std::size_t> counts, Out out,
                               const std::vector<op_id>& own_ready, const std::vector<std::vector<op_id>>& clear,
                               std::uint32_t first_tag, receives_by_step posted = {}) {
    const int p = req.size, r = req.rank, next = (r + 1) % p, prev = plan::mod(r - 1, p);
    const std::size_t slice = plan::slice_elements(req), stride = max_slices(counts, slice);
    std::vector<op_id> received = own_ready;
    for (int step = 0; step < p - 1; ++step) {
      const int send_c = plan::mod(r - step, p), recv_c = plan::mod(r - step - 1, p);
      const std::size_t send_slices = plan::slice_count(counts[std::size_t(send_c)], slice);
      const std::size_t recv_slices = plan::slice_count(counts[std::size_t(recv_c)], slice);
      for (std::size_t k = 0; k < send_slices; ++k)
        s.send(next, first_tag + tag(step, k, stride), plan::slice_of(out(send_c), slice, k),
               {k < received.size() ? received[k] : no_dependency});
      std::vector<op_id> now(recv_slices, no_dependency);
      for (std::size_t k = 0; k < recv_slices; ++k) {
        const op_id gate = step < int(clear.size()) && k < clear[std::size_t(step)].size() ? clear[std::size_t(step)][k] : no_dependency;
        now[k] = s.recv(prev, first_tag + tag(step, k, stride), plan::slice_of(out(recv_c), slice, k),
                        {gate, steps_back(posted, k)});
      }
      posted.push_back(now);
      received = std::move(now);
    }
  }

  COLLECTIVES_DECL static schedule reduce_scatter_to_output(const plan_request& req, std::span<const std::size_t> counts);
  COLLECTIVES_DECL static schedule all_gather_from_input(const plan_request& req, std::span<const std::size_t> counts);

  static std::uint32_t tag(int step, std::size_t slice, std::size_t stride) {
    return static_cast<std::uint32_t>(std::size_t(step) * stride + slice);
  }
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "ring.ipp"
#endif
