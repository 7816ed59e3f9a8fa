// This library's calls as the perf programs make them: the collective, algorithm and
// op the flags name, each instantiated at compile time, on any communicator and any
// buffer kind (std::span over host memory in ours.hpp, device_span in ours_device.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <collectives/collectives.hpp>

#include "collective.hpp"
#include "data.hpp"
#include "report.hpp"

namespace perf {

namespace coll = collectives;

template <collective C>
auto kind_of() {
  if constexpr (C == collective::all_reduce) return coll::kind::all_reduce{};
  else if constexpr (C == collective::all_gather) return coll::kind::all_gather{};
  else if constexpr (C == collective::reduce_scatter) return coll::kind::reduce_scatter{};
  else if constexpr (C == collective::broadcast) return coll::kind::broadcast{};
  else if constexpr (C == collective::reduce) return coll::kind::reduce{};
  else if constexpr (C == collective::all_to_all) return coll::kind::all_to_all{};
  else if constexpr (C == collective::gather) return coll::kind::gather{};
  else return coll::kind::scatter{};
}

// The algorithms --algo names: automatic's candidates, hierarchical (ring on each
// host and across hosts), then automatic itself, each by its name; the flags keep
// their short spellings for two of them.
template <class... Candidates>
auto with_automatic(coll::algorithm_list<Candidates...>)
    -> coll::algorithm_list<Candidates..., coll::hierarchical<>, coll::automatic>;
using algorithms = decltype(with_automatic(coll::automatic::candidates{}));

template <class A>
inline constexpr std::string_view flag_name = A::name;
template <>
inline constexpr std::string_view flag_name<coll::double_binary_tree> = "tree";
template <>
inline constexpr std::string_view flag_name<coll::automatic> = "auto";

// An algorithm as its place in `algorithms`.
using algorithm_choice = std::size_t;

inline std::optional<algorithm_choice> algorithm_named(std::string_view flag) {
  return []<class... As>(std::string_view f, coll::algorithm_list<As...>) -> std::optional<algorithm_choice> {
    algorithm_choice i = 0;
    if (((f == flag_name<As> || f == std::string_view(As::name) ? true : (++i, false)) || ...)) return i;
    return std::nullopt;
  }(flag, algorithms{});
}

// "ring, tree, direct or auto" for messages, "ring tree direct auto" for the usage.
inline std::string algorithm_flags(std::string_view separator = ", ", std::string_view last_separator = " or ") {
  return [&]<class... As>(coll::algorithm_list<As...>) {
    std::string out;
    std::size_t left = sizeof...(As);
    ((out.append(flag_name<As>), out.append(--left > 1 ? separator : left == 1 ? last_separator : "")), ...);
    return out;
  }(algorithms{});
}

// Calls f.template operator()<Algorithm>() with the algorithm type `a` stands for.
template <class F>
void with_algorithm(algorithm_choice a, F&& f) {
  [&]<class... As>(coll::algorithm_list<As...>) {
    algorithm_choice i = 0;
    ((i++ == a ? (f.template operator()<As>(), 0) : 0), ...);
  }(algorithms{});
}

// Whether the algorithm has a schedule for the collective (README: ring has none for
// gather, scatter and all_to_all; the tree only for all_reduce, reduce, broadcast).
inline bool algorithm_implements(algorithm_choice a, collective c) {
  bool yes = false;
  with_algorithm(a, [&]<class A>() {
    switch (c) {
      case collective::all_reduce: yes = coll::implements<A, coll::kind::all_reduce>; break;
      case collective::all_gather: yes = coll::implements<A, coll::kind::all_gather>; break;
      case collective::reduce_scatter: yes = coll::implements<A, coll::kind::reduce_scatter>; break;
      case collective::broadcast: yes = coll::implements<A, coll::kind::broadcast>; break;
      case collective::reduce: yes = coll::implements<A, coll::kind::reduce>; break;
      case collective::all_to_all: yes = coll::implements<A, coll::kind::all_to_all>; break;
      case collective::gather: yes = coll::implements<A, coll::kind::gather>; break;
      case collective::scatter: yes = coll::implements<A, coll::kind::scatter>; break;
    }
  });
  return yes;
}

// The op K as the library takes it; absmax is the user functor, passed as a user
// would pass it (UserOp: a device build passes a copy callable in kernels).
template <op_kind K, class UserOp = absmax>
constexpr auto library_op() {
  if constexpr (K == op_kind::sum) return coll::sum{};
  else if constexpr (K == op_kind::prod) return coll::prod{};
  else if constexpr (K == op_kind::min) return coll::min{};
  else if constexpr (K == op_kind::max) return coll::max{};
  else if constexpr (K == op_kind::avg) return coll::avg{};
  else return UserOp{};
}

// One out-of-place call of collective C with op K, by the algorithm `a` names. The
// buffers are spans (host or device), taken by value as the library's calls take them.
template <collective C, op_kind K, class UserOp, class Communicator, class In, class Out>
void call_library(algorithm_choice a, Communicator& comm, In input, Out output, int root) {
  with_algorithm(a, [&]<class A>() {
    if constexpr (coll::implements<A, decltype(kind_of<C>())>) {
      [[maybe_unused]] constexpr auto op = library_op<K, UserOp>();
      if constexpr (C == collective::all_reduce) coll::all_reduce<A>(comm, input, output, op);
      else if constexpr (C == collective::all_gather) coll::all_gather<A>(comm, input, output);
      else if constexpr (C == collective::reduce_scatter) coll::reduce_scatter<A>(comm, input, output, op);
      else if constexpr (C == collective::broadcast) coll::broadcast<A>(comm, input, output, root);
      else if constexpr (C == collective::reduce) coll::reduce<A>(comm, input, output, op, root);
      else if constexpr (C == collective::all_to_all) coll::all_to_all<A>(comm, input, output);
      else if constexpr (C == collective::gather) coll::gather<A>(comm, input, output, root);
      else coll::scatter<A>(comm, input, output, root);
    }
  });
}

// The in-place form.
template <collective C, op_kind K, class UserOp, class Communicator, class Data>
void call_library_in_place(algorithm_choice a, Communicator& comm, Data data, int root) {
  with_algorithm(a, [&]<class A>() {
    if constexpr (coll::implements<A, decltype(kind_of<C>())>) {
      [[maybe_unused]] constexpr auto op = library_op<K, UserOp>();
      if constexpr (C == collective::all_reduce) coll::all_reduce<A>(comm, data, op);
      else if constexpr (C == collective::all_gather) coll::all_gather<A>(comm, data);
      else if constexpr (C == collective::reduce_scatter) coll::reduce_scatter<A>(comm, data, op);
      else if constexpr (C == collective::broadcast) coll::broadcast<A>(comm, data, root);
      else if constexpr (C == collective::reduce) coll::reduce<A>(comm, data, op, root);
      else if constexpr (C == collective::all_to_all) coll::all_to_all<A>(comm, data);
      else if constexpr (C == collective::gather) coll::gather<A>(comm, data, root);
      else coll::scatter<A>(comm, data, root);
    }
  });
}

// What this library's backends share (ours.hpp on host buffers, ours_device.hpp on
// device buffers): the harness's rank queries and small host reductions on the
// communicator, and the algorithm the flags name.
template <class Communicator>
class backend_base {
 public:
  static constexpr bool reduce_scatter_in_place_result_at_own_part = true;

  backend_base(Communicator& comm, std::string algorithm, std::string how_joined)
      : comm_(comm), algorithm_name_(std::move(algorithm)), algorithm_(algorithm_named(algorithm_name_).value_or(0)),
        how_joined_(std::move(how_joined)) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  void barrier() { coll::barrier(comm_); }
  double max_over_ranks(double v) { return coll::all_reduce(comm_, v, coll::max{}); }
  long long sum_over_ranks(long long v) { return coll::all_reduce(comm_, std::int64_t{v}, coll::sum{}); }

 protected:
  run_description describe_as(std::string transport, std::string detail) const {
    if (!how_joined_.empty()) detail += "; " + how_joined_;
    return {.program = "collectives", .transport = std::move(transport), .transport_detail = std::move(detail),
            .algorithm = algorithm_name_, .ranks = comm_.size()};
  }

  Communicator& comm_;
  std::string algorithm_name_;
  algorithm_choice algorithm_;
  std::string how_joined_;
};

}  // namespace perf
