// The Algorithm concept: a tag type whose static `plan` functions turn a request
// (rank, size, counts) into a schedule for each collective it implements.
// Requirements are tabled in docs/concepts/algorithm.md.
#pragma once

#include <concepts>

#include "schedule.hpp"

namespace collectives {

// One tag per collective; an algorithm implements a collective by providing
// `static schedule plan(<kind>, const plan_request&)`.
namespace kind {
struct broadcast {};
struct reduce {};
struct all_reduce {};
struct gather {};
struct gatherv {};
struct scatter {};
struct scatterv {};
struct all_gather {};
struct all_gatherv {};
struct reduce_scatter {};
struct reduce_scatterv {};
struct all_to_all {};
struct all_to_allv {};
struct barrier {};
}  // namespace kind

template <class A>
concept algorithm = requires {
  { A::name } -> std::convertible_to<const char*>;
  // True if every reduction is applied in rank order, so non-commutative ops are fine.
  { A::preserves_rank_order } -> std::convertible_to<bool>;
};

template <class A, class Kind>
concept implements = algorithm<A> && requires(const plan_request& r) {
  { A::plan(Kind{}, r) } -> std::same_as<schedule>;
};

// A list of algorithm types (automatic_of's candidates, for one).
template <class... Algorithms>
struct algorithm_list {};

// Optional: the algorithm estimates a call's seconds from the request's link costs,
// `static double cost(<kind>, const plan_request&)`, which makes it a candidate of
// automatic_of for that collective.
template <class A, class Kind>
concept estimates_cost = implements<A, Kind> && requires(const plan_request& r) {
  { A::cost(Kind{}, r) } -> std::same_as<double>;
};

// Optional: the algorithm plans Kind by which host each rank is on, which the call
// then learns and passes as plan_request::hosts: `static constexpr bool needs_hosts`
// (every kind it implements), or a choice among algorithms, `needs_hosts_for<Kind>`.
template <class A, class Kind>
concept plans_by_hosts = implements<A, Kind> && (requires { requires A::needs_hosts; } ||
                                                 requires { requires A::template needs_hosts_for<Kind>; });

}  // namespace collectives
