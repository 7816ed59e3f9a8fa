// This library's side of the perf programs: a harness backend over
// communicator<automatic_transport>, so collectives-run --transport (or --transport
// here) picks shm or tcp, and --algo picks the call's Algorithm template argument.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

#include "harness.hpp"
#include "library_calls.hpp"

namespace perf {

using communicator = coll::communicator<coll::automatic_transport>;

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
    call_library<C, K, absmax>(algorithm_, comm_, input, output, root);
  }

  template <collective C, class T, op_kind K>
  void call_in_place(std::span<T> data, int root) {
    call_library_in_place<C, K, absmax>(algorithm_, comm_, data, root);
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
