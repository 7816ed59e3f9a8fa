// automatic: picks, per call, the cheapest algorithm that implements the collective
// (and keeps rank order when the op needs it), by the alpha-beta cost each algorithm
// estimates from the transport's link_costs. Each candidate's schedule is compiled
// in; only the choice among them happens at run time. automatic_of composes any list
// of algorithms; `automatic` is the library's default list.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "../concepts/algorithm.hpp"
#include "../error.hpp"
#include "direct.hpp"
#include "halving_doubling.hpp"
#include "hierarchical.hpp"
#include "ring.hpp"
#include "schedule.hpp"
#include "tree.hpp"

namespace collectives {

template <algorithm... Algorithms>
struct automatic_of {
  static_assert(sizeof...(Algorithms) > 0, "collectives: automatic_of needs at least one algorithm");

  static constexpr const char* name = "automatic";
  // It never picks an algorithm that reorders the op for an op that needs rank order.
  static constexpr bool preserves_rank_order = (Algorithms::preserves_rank_order || ...);
  using candidates = algorithm_list<Algorithms...>;
  // The call learns the ranks' hosts when a candidate for Kind plans by them.
  template <class Kind>
  static constexpr bool needs_hosts_for = (plans_by_hosts<Algorithms, Kind> || ...);

  template <class Kind>
    requires(implements<Algorithms, Kind> || ...)
  static schedule plan(Kind k, const plan_request& r) {
    schedule s;
    visit_chosen(k, r, [&]<class A>() { s = plan_of<A>(k, r); });
    return s;
  }

  // Whether the chosen algorithm's plans turn with the rank (concepts/algorithm.hpp).
  template <class Kind>
    requires(implements<Algorithms, Kind> || ...)
  static bool turns_with_rank(Kind k, const plan_request& r) {
    bool turns = false;
    visit_chosen(k, r, [&]<class A>() { turns = collectives::turns_with_rank<A>(k, r); });
    return turns;
  }

  // Why: each candidate's estimate, for the INFO log ("ring 41 us, tree 60 us, ...").
  template <class Kind>
    requires(implements<Algorithms, Kind> || ...)
  static std::string estimates(Kind k, const plan_request& r) {
    std::string text;
    auto add = [&]<class A>() {
      if constexpr (estimates_cost<A, Kind>) {
        if (!A::preserves_rank_order && !r.commutative) return;
        const double s = cost_of<A>(k, r);
        char figure[32];
        std::snprintf(figure, sizeof figure, s < 1e-3 ? " %.3g us" : s < 1 ? " %.3g ms" : " %.3g s",
                      s < 1e-3 ? s * 1e6 : s < 1 ? s * 1e3 : s);
        text += (text.empty() ? "" : ", ") + std::string(A::name) + figure;
      }
    };
    (add.template operator()<Algorithms>(), ...);
    return text;
  }

  // The name of the algorithm that plans this call (for the debug log and the tests).
  template <class Kind>
    requires(implements<Algorithms, Kind> || ...)
  static const char* chosen_name(Kind k, const plan_request& r) {
    const char* chosen = nullptr;
    visit_chosen(k, r, [&]<class A>() { chosen = A::name; });
    return chosen;
  }

 private:
  static constexpr std::size_t none = sizeof...(Algorithms);

  // The candidates are the algorithms that implement Kind and may apply the op; among
  // those that estimate a cost, the cheapest wins, and without any estimate the first
  // does. Ties (equal estimates, up to rounding) go to the earlier one in the list, so
  // that the choice does not flip with the last bits of a size.
  template <class Kind>
  static std::size_t chosen_index(Kind k, const plan_request& r) {
    auto clearly_below = [](double a, double b) { return a < b * (1 - 1e-9); };
    std::size_t first = none, cheapest = none, i = 0;
    double cheapest_s = 0;
    auto consider = [&]<class A>() {
      if constexpr (implements<A, Kind>) {
        if (A::preserves_rank_order || r.commutative) {
          if (first == none) first = i;
          if constexpr (estimates_cost<A, Kind>) {
            const double s = cost_of<A>(k, r);
            if (cheapest == none || clearly_below(s, cheapest_s)) cheapest = i, cheapest_s = s;
          }
        }
      }
      ++i;
    };
    (consider.template operator()<Algorithms>(), ...);
    return cheapest != none ? cheapest : first;
  }

  // Calls f.template operator()<A>() for the chosen algorithm A.
  template <class Kind, class F>
  static void visit_chosen(Kind k, const plan_request& r, F&& f) {
    const std::size_t chosen = chosen_index(k, r);
    if (chosen == none)
      throw error(errc::invalid_config, "automatic: no algorithm of its list implements this collective in rank order");
    std::size_t i = 0;
    auto call_if_chosen = [&]<class A>() {
      if constexpr (implements<A, Kind>)
        if (i == chosen) f.template operator()<A>();
      ++i;
    };
    (call_if_chosen.template operator()<Algorithms>(), ...);
  }
};

// Deprecated with automatic::choose, the only thing that answers with it: the closed
// list of algorithms automatic picks from (chosen_name names any of the list).
enum class algorithm_choice {
  ring,
  double_binary_tree,
  direct,
  halving_doubling,
  hierarchical,
};

// The default list; its order breaks ties (ring, then the tree, then direct, then
// halving-doubling, then hierarchical, which on one host is a ring of its own).
struct automatic : automatic_of<ring, double_binary_tree, direct, halving_doubling, hierarchical<>> {
  // Answers with the enum's names for the algorithms of the list.
  template <class Kind>
  [[deprecated("use automatic::chosen_name")]] static algorithm_choice choose(Kind k, const plan_request& r)
    requires estimates_cost<direct, Kind>
  {
    const std::string_view chosen = chosen_name(k, r);
    if (chosen == ring::name) return algorithm_choice::ring;
    if (chosen == double_binary_tree::name) return algorithm_choice::double_binary_tree;
    if (chosen == halving_doubling::name) return algorithm_choice::halving_doubling;
    if (chosen == hierarchical<>::name) return algorithm_choice::hierarchical;
    return algorithm_choice::direct;
  }
};

[[deprecated("use the algorithm's name")]] inline const char* to_string(algorithm_choice c) {
  switch (c) {
    case algorithm_choice::ring: return ring::name;
    case algorithm_choice::double_binary_tree: return double_binary_tree::name;
    case algorithm_choice::direct: return direct::name;
    case algorithm_choice::halving_doubling: return halving_doubling::name;
    case algorithm_choice::hierarchical: return hierarchical<>::name;
  }
  return "?";
}

// Deprecated: the cost model's functions from before each algorithm estimated its own
// (rooted: broadcast and reduce; sharded: all_gather and reduce_scatter).
namespace cost {
inline plan_request request_of(int p, double bytes, const link_costs& c) {
  return {.size = p, .count = static_cast<std::size_t>(bytes), .element_size = 1, .costs = c};
}
[[deprecated("use ring::cost(kind::all_reduce{}, request)")]]
inline double ring_all_reduce(int p, double bytes, const link_costs& c) {
  return ring::cost(kind::all_reduce{}, request_of(p, bytes, c));
}
[[deprecated("use double_binary_tree::cost(kind::all_reduce{}, request)")]]
inline double tree_all_reduce(int p, double bytes, const link_costs& c) {
  return double_binary_tree::cost(kind::all_reduce{}, request_of(p, bytes, c));
}
[[deprecated("use direct::cost(kind::all_reduce{}, request)")]]
inline double direct_all_reduce(int p, double bytes, const link_costs& c) {
  return direct::cost(kind::all_reduce{}, request_of(p, bytes, c));
}
[[deprecated("use ring::cost(kind::broadcast{}, request)")]]
inline double ring_rooted(int p, double bytes, const link_costs& c) {
  return ring::cost(kind::broadcast{}, request_of(p, bytes, c));
}
[[deprecated("use double_binary_tree::cost(kind::broadcast{}, request)")]]
inline double tree_rooted(int p, double bytes, const link_costs& c) {
  return double_binary_tree::cost(kind::broadcast{}, request_of(p, bytes, c));
}
[[deprecated("use direct::cost(kind::broadcast{}, request)")]]
inline double direct_rooted(int p, double bytes, const link_costs& c) {
  return direct::cost(kind::broadcast{}, request_of(p, bytes, c));
}
[[deprecated("use cost_of<ring>(kind::all_gather{}, request)")]]
inline double ring_sharded(int p, double bytes, const link_costs& c) {
  return cost_of<ring>(kind::all_gather{}, request_of(p, bytes, c));
}
[[deprecated("use cost_of<direct>(kind::all_gather{}, request)")]]
inline double direct_sharded(int p, double bytes, const link_costs& c) {
  return cost_of<direct>(kind::all_gather{}, request_of(p, bytes, c));
}
}  // namespace cost

}  // namespace collectives
