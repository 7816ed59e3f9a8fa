// This library's side of the perf programs: a harness backend over
// communicator<automatic_transport>, so collectives-run --transport (or --transport
// here) picks shm or tcp, and --algo picks the call's Algorithm template argument.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

#include "harness.hpp"

namespace perf {

namespace coll = collectives;
using communicator = coll::communicator<coll::automatic_transport>;

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

enum class algorithm_choice { ring, tree, direct, automatic };

inline algorithm_choice algorithm_named(std::string_view name) {
  if (name == "ring") return algorithm_choice::ring;
  if (name == "tree") return algorithm_choice::tree;
  if (name == "direct") return algorithm_choice::direct;
  return algorithm_choice::automatic;
}

// Calls f.template operator()<Algorithm>() with the algorithm type `a` stands for.
template <class F>
void with_algorithm(algorithm_choice a, F&& f) {
  switch (a) {
    case algorithm_choice::ring: f.template operator()<coll::ring>(); return;
    case algorithm_choice::tree: f.template operator()<coll::double_binary_tree>(); return;
    case algorithm_choice::direct: f.template operator()<coll::direct>(); return;
    case algorithm_choice::automatic: f.template operator()<coll::automatic>(); return;
  }
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

template <op_kind K>
constexpr auto library_op() {
  if constexpr (K == op_kind::sum) return coll::sum{};
  else if constexpr (K == op_kind::prod) return coll::prod{};
  else if constexpr (K == op_kind::min) return coll::min{};
  else if constexpr (K == op_kind::max) return coll::max{};
  else if constexpr (K == op_kind::avg) return coll::avg{};
  else return absmax{};  // the user functor, as a user would pass it
}

class library_backend {
 public:
  static constexpr bool reduce_scatter_in_place_result_at_own_part = true;

  library_backend(communicator& comm, std::string algorithm, std::string how_joined)
      : comm_(comm), algorithm_name_(std::move(algorithm)), algorithm_(algorithm_named(algorithm_name_)),
        how_joined_(std::move(how_joined)) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  void barrier() { coll::barrier(comm_); }
  double max_over_ranks(double v) { return coll::all_reduce(comm_, v, coll::max{}); }
  long long sum_over_ranks(long long v) { return coll::all_reduce(comm_, std::int64_t{v}, coll::sum{}); }

  run_description describe() const {
    std::string detail = comm_.transport().describe();
    if (!how_joined_.empty()) detail += "; " + how_joined_;
    return {.program = "collectives", .transport = std::string(comm_.transport().name()), .transport_detail = detail,
            .algorithm = algorithm_name_, .ranks = comm_.size()};
  }

  template <collective C, class T, op_kind K>
  void call(std::span<const T> input, std::span<T> output, int root) {
    with_algorithm(algorithm_, [&]<class A>() {
      if constexpr (coll::implements<A, decltype(kind_of<C>())>) {
        [[maybe_unused]] constexpr auto op = library_op<K>();
        if constexpr (C == collective::all_reduce) coll::all_reduce<A>(comm_, input, output, op);
        else if constexpr (C == collective::all_gather) coll::all_gather<A>(comm_, input, output);
        else if constexpr (C == collective::reduce_scatter) coll::reduce_scatter<A>(comm_, input, output, op);
        else if constexpr (C == collective::broadcast) coll::broadcast<A>(comm_, input, output, root);
        else if constexpr (C == collective::reduce) coll::reduce<A>(comm_, input, output, op, root);
        else if constexpr (C == collective::all_to_all) coll::all_to_all<A>(comm_, input, output);
        else if constexpr (C == collective::gather) coll::gather<A>(comm_, input, output, root);
        else coll::scatter<A>(comm_, input, output, root);
      }
    });
  }

  template <collective C, class T, op_kind K>
  void call_in_place(std::span<T> data, int root) {
    with_algorithm(algorithm_, [&]<class A>() {
      if constexpr (coll::implements<A, decltype(kind_of<C>())>) {
        [[maybe_unused]] constexpr auto op = library_op<K>();
        if constexpr (C == collective::all_reduce) coll::all_reduce<A>(comm_, data, op);
        else if constexpr (C == collective::all_gather) coll::all_gather<A>(comm_, data);
        else if constexpr (C == collective::reduce_scatter) coll::reduce_scatter<A>(comm_, data, op);
        else if constexpr (C == collective::broadcast) coll::broadcast<A>(comm_, data, root);
        else if constexpr (C == collective::reduce) coll::reduce<A>(comm_, data, op, root);
        else if constexpr (C == collective::all_to_all) coll::all_to_all<A>(comm_, data);
        else if constexpr (C == collective::gather) coll::gather<A>(comm_, data, root);
        else coll::scatter<A>(comm_, data, root);
      }
    });
  }

 private:
  communicator& comm_;
  std::string algorithm_name_;
  algorithm_choice algorithm_;
  std::string how_joined_;
};

// all_reduce, reduce and reduce_scatter: compiled apart (reductions.cpp), since the
// types x ops instantiations are most of the build.
int run_reduction(library_backend& backend, const options& o);

}  // namespace perf
