// automatic: picks, per call, the cheapest algorithm that implements the collective
// (and keeps rank order when the op needs it), by an alpha-beta cost model fed with
// the transport's link_costs. Each candidate's schedule is compiled in; only the
// choice among them happens at run time.
#pragma once

#include <cmath>
#include <limits>

#include "../concepts/algorithm.hpp"
#include "direct.hpp"
#include "ring.hpp"
#include "schedule.hpp"
#include "tree.hpp"

namespace collectives {

enum class algorithm_choice { ring, double_binary_tree, direct };

inline const char* to_string(algorithm_choice c) {
  switch (c) {
    case algorithm_choice::ring: return ring::name;
    case algorithm_choice::double_binary_tree: return double_binary_tree::name;
    case algorithm_choice::direct: return direct::name;
  }
  return "?";
}

// Estimated seconds for one call: latency of the steps on the critical path, plus
// the bytes the busiest rank moves and, where reductions cannot overlap with
// transfers, the time to combine them.
namespace cost {

inline double ring_all_reduce(int p, double bytes, const link_costs& c) {
  const double share = bytes * (p - 1) / p;
  return 2.0 * (p - 1) * (c.latency_s + c.per_message_s) + 2.0 * share * c.seconds_per_byte;
}
inline double tree_all_reduce(int p, double bytes, const link_costs& c) {
  // Up and down each level; an inner node sends and receives the whole half twice.
  return 2.0 * double_binary_tree::depth(p) * (c.latency_s + c.per_message_s) + 2.0 * bytes * c.seconds_per_byte;
}
inline double direct_all_reduce(int p, double bytes, const link_costs& c) {
  if (bytes <= double(direct::policy.one_round_all_reduce_max_bytes))
    // One round of P-1 concurrent messages of the whole buffer; each rank combines
    // all it received.
    return c.latency_s + (p - 1) * (c.per_message_s + bytes * (c.seconds_per_byte + c.reduce_seconds_per_byte));
  const double share = bytes * (p - 1) / p;
  // Two rounds of P-1 concurrent messages; the owner combines only after receiving.
  return 2.0 * c.latency_s + 2.0 * (p - 1) * c.per_message_s + 2.0 * share * c.seconds_per_byte +
         share * c.reduce_seconds_per_byte;
}
// broadcast and reduce: a pipelined chain, a pipelined tree, or the root alone.
inline double ring_rooted(int p, double bytes, const link_costs& c) {
  return (p - 1) * (c.latency_s + c.per_message_s) + bytes * c.seconds_per_byte;
}
inline double tree_rooted(int p, double bytes, const link_costs& c) {
  return double_binary_tree::depth(p) * (c.latency_s + c.per_message_s) + bytes * c.seconds_per_byte;
}
inline double direct_rooted(int p, double bytes, const link_costs& c) {
  return c.latency_s + (p - 1) * (c.per_message_s + bytes * c.seconds_per_byte);
}
// all_gather and reduce_scatter: ring steps versus one round of P-1 messages.
inline double ring_sharded(int p, double bytes, const link_costs& c) {
  return (p - 1) * (c.latency_s + c.per_message_s + bytes * c.seconds_per_byte);
}
inline double direct_sharded(int p, double bytes, const link_costs& c) {
  return c.latency_s + (p - 1) * (c.per_message_s + bytes * c.seconds_per_byte);
}

}  // namespace cost

struct automatic {
  static constexpr const char* name = "automatic";
  static constexpr bool preserves_rank_order = true;  // it never picks ring for such ops

  static algorithm_choice choose(kind::all_reduce, const plan_request& r) {
    const double bytes = double(r.count) * r.element_size;
    return cheapest(r, cost::ring_all_reduce(r.size, bytes, r.costs), cost::tree_all_reduce(r.size, bytes, r.costs),
                    cost::direct_all_reduce(r.size, bytes, r.costs));
  }
  static algorithm_choice choose(kind::broadcast, const plan_request& r) { return rooted(r); }
  static algorithm_choice choose(kind::reduce, const plan_request& r) { return rooted(r); }
  static algorithm_choice choose(kind::all_gather, const plan_request& r) { return sharded(r); }
  static algorithm_choice choose(kind::reduce_scatter, const plan_request& r) { return sharded(r); }
  static algorithm_choice choose(kind::all_gatherv, const plan_request& r) { return sharded(r); }
  static algorithm_choice choose(kind::reduce_scatterv, const plan_request& r) { return sharded(r); }

  template <class Kind>
  static schedule plan(Kind k, const plan_request& r) {
    if constexpr (requires { choose(k, r); }) {
      switch (choose(k, r)) {
        case algorithm_choice::ring:
          if constexpr (implements<ring, Kind>) return ring::plan(k, r);
          break;
        case algorithm_choice::double_binary_tree:
          if constexpr (implements<double_binary_tree, Kind>) return double_binary_tree::plan(k, r);
          break;
        case algorithm_choice::direct: break;
      }
    }
    return direct::plan(k, r);  // the only one for gather, scatter, all_to_all, barrier
  }

 private:
  // Ties (equal estimates, up to rounding) go to ring, then the tree, so that the
  // choice does not flip with the last bits of a size.
  static algorithm_choice cheapest(const plan_request& r, double ring_s, double tree_s, double direct_s) {
    if (!r.commutative) ring_s = std::numeric_limits<double>::infinity();
    auto clearly_below = [](double a, double b) { return a < b * (1 - 1e-9); };
    algorithm_choice best = algorithm_choice::ring;
    double best_s = ring_s;
    if (clearly_below(tree_s, best_s)) best = algorithm_choice::double_binary_tree, best_s = tree_s;
    if (clearly_below(direct_s, best_s)) best = algorithm_choice::direct;
    return best;
  }
  static algorithm_choice rooted(const plan_request& r) {
    const double bytes = double(r.count) * r.element_size;
    return cheapest(r, cost::ring_rooted(r.size, bytes, r.costs), cost::tree_rooted(r.size, bytes, r.costs),
                    cost::direct_rooted(r.size, bytes, r.costs));
  }
  static algorithm_choice sharded(const plan_request& r) {
    double bytes = double(r.count) * r.element_size;
    if (!r.counts.empty()) {  // v-forms: the largest part decides
      bytes = 0;
      for (auto c : r.counts) bytes = std::fmax(bytes, double(c) * r.element_size);
    }
    return cheapest(r, cost::ring_sharded(r.size, bytes, r.costs), std::numeric_limits<double>::infinity(),
                    cost::direct_sharded(r.size, bytes, r.costs));
  }
};

}  // namespace collectives
