// This library's side of the perf programs: a harness backend over
// communicator<automatic_transport>, so collectives-run --transport (or --transport
// here) picks shm, tcp or (built with libfabric) rdma, and --algo picks the call's
// Algorithm template argument.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>
// Built with collectives::rdma (bench/CMakeLists.txt defines this where libfabric was
// found): including the header plugs rdma into automatic_transport.
#if defined(COLLECTIVES_PERF_WITH_RDMA)
#include <collectives/transport/rdma.hpp>
#endif

#include "harness.hpp"
#include "library_calls.hpp"

namespace perf {

using communicator = coll::communicator<coll::automatic_transport>;

class library_backend : public backend_base<communicator> {
 public:
  using backend_base::backend_base;

  run_description describe() const {
    return describe_as(std::string(comm_.transport().name()), comm_.transport().describe());
  }

  template <collective C, class T, op_kind K>
  void call(std::span<const T> input, std::span<T> output, int root) {
    call_library<C, K, absmax>(algorithm_, comm_, input, output, root);
  }

  template <collective C, class T, op_kind K>
  void call_in_place(std::span<T> data, int root) {
    call_library_in_place<C, K, absmax>(algorithm_, comm_, data, root);
  }
};

// all_reduce, reduce and reduce_scatter: compiled apart (reductions.cpp), since the
// types x ops instantiations are most of the build.
int run_reduction(library_backend& backend, const options& o);

}  // namespace perf
