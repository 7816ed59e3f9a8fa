// The Algorithm concept: a tag type whose static `plan` functions turn a request
// (rank, size, counts) into a schedule for each collective it implements.
// Requirements are tabled in docs/concepts/algorithm.md.
#pragma once

#include <concepts>
#include <cstddef>
#include <vector>

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

// The v-form of an even collective (gather: gatherv, ...), or the collective itself.
template <class Kind>
struct uneven_form {
  using type = Kind;
};
template <> struct uneven_form<kind::gather> { using type = kind::gatherv; };
template <> struct uneven_form<kind::scatter> { using type = kind::scatterv; };
template <> struct uneven_form<kind::all_gather> { using type = kind::all_gatherv; };
template <> struct uneven_form<kind::reduce_scatter> { using type = kind::reduce_scatterv; };
template <> struct uneven_form<kind::all_to_all> { using type = kind::all_to_allv; };
template <class Kind>
using uneven_form_t = typename uneven_form<Kind>::type;
template <class Kind>
inline constexpr bool is_even_form = !std::same_as<uneven_form_t<Kind>, Kind>;

// A's own plan for Kind.
template <class A, class Kind>
concept plans_itself = algorithm<A> && requires(const plan_request& r) {
  { A::plan(Kind{}, r) } -> std::same_as<schedule>;
};

// An algorithm implements a collective by planning it, or an even collective by
// planning its v-form: an even call is then planned as the v-form with every rank's
// count the same (plan_of), so an algorithm writes one plan per collective.
template <class A, class Kind>
concept implements = plans_itself<A, Kind> || (is_even_form<Kind> && plans_itself<A, uneven_form_t<Kind>>);

// A list of algorithm types (automatic_of's candidates, for one).
template <class... Algorithms>
struct algorithm_list {};

// A's own estimate for Kind.
template <class A, class Kind>
concept costs_itself = requires(const plan_request& r) {
  { A::cost(Kind{}, r) } -> std::same_as<double>;
};

// Optional: the algorithm estimates a call's seconds from the request's link costs,
// `static double cost(<kind>, const plan_request&)` (for an even collective it plans as
// its v-form, the v-form's), which makes it a candidate of automatic_of for that collective.
template <class A, class Kind>
concept estimates_cost = implements<A, Kind> && (plans_itself<A, Kind> ? costs_itself<A, Kind>
                                                                        : costs_itself<A, uneven_form_t<Kind>>);

// The request of an even call as its v-form's: every rank's count is the request's
// count (all_to_allv: sent and received).
class even_counts {
 public:
  template <class Kind>
  even_counts(Kind, const plan_request& even) : counts_(static_cast<std::size_t>(even.size), even.count), request_(even) {
    request_.counts = counts_;
    if constexpr (std::same_as<Kind, kind::all_to_all>) request_.recv_counts = counts_;
  }
  even_counts(const even_counts&) = delete;  // request_ points into counts_
  even_counts& operator=(const even_counts&) = delete;
  const plan_request& request() const noexcept { return request_; }

 private:
  std::vector<std::size_t> counts_;
  plan_request request_;
};

// A's schedule for a call of Kind: its own plan, or its v-form's for an even call. It
// names A, unless A named the algorithm it chose (automatic).
template <class A, class Kind>
  requires implements<A, Kind>
schedule plan_of(Kind k, const plan_request& r) {
  schedule s;
  if constexpr (plans_itself<A, Kind>) s = A::plan(k, r);
  else s = A::plan(uneven_form_t<Kind>{}, even_counts(k, r).request());
  if (!s.algorithm) s.algorithm = A::name;
  return s;
}

// Optional: `static bool turns_with_rank(<kind>, const plan_request&)`, true where A's
// plans of this call, written relative to each rank (compact_plan), are the same on
// every rank: rank r's is rank 0's turned by r. A simulated cluster then plans one rank
// for all (simulation.hpp); schedule_test holds each such claim to the plans. For an
// even call that A plans as its v-form, the v-form's answer.
template <class A, class Kind>
bool turns_with_rank(Kind k, const plan_request& r) {
  if constexpr (plans_itself<A, Kind>) {
    if constexpr (requires { { A::turns_with_rank(k, r) } -> std::same_as<bool>; }) return A::turns_with_rank(k, r);
    else return false;
  } else if constexpr (requires(uneven_form_t<Kind> u) { { A::turns_with_rank(u, r) } -> std::same_as<bool>; }) {
    return A::turns_with_rank(uneven_form_t<Kind>{}, even_counts(k, r).request());
  } else {
    return false;
  }
}

// A's estimate of a call of Kind, the same way.
template <class A, class Kind>
  requires estimates_cost<A, Kind>
double cost_of(Kind k, const plan_request& r) {
  if constexpr (plans_itself<A, Kind>) return A::cost(k, r);
  else return A::cost(uneven_form_t<Kind>{}, even_counts(k, r).request());
}

// Optional: the algorithm plans Kind by which host each rank is on, which the call
// then learns and passes as plan_request::hosts: `static constexpr bool needs_hosts`
// (every kind it implements), or a choice among algorithms, `needs_hosts_for<Kind>`.
template <class A, class Kind>
concept plans_by_hosts = implements<A, Kind> && (requires { requires A::needs_hosts; } ||
                                                 requires { requires A::template needs_hosts_for<Kind>; });

}  // namespace collectives
