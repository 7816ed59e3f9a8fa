// The compiled part of the RDMA transport, for separate compilation beside
// <collectives/impl/src.hpp> (the same rules): include it in that one source file too
// where the program uses collectives::rdma. collectives::compiled holds it wherever the
// library was built with libfabric.
#pragma once

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#error "<collectives/impl/rdma_src.hpp> is for separate compilation: define COLLECTIVES_SEPARATE_COMPILATION in every translation unit"
#endif

#include "../communicator.hpp"
#include "../transport/rdma/transport.ipp"

// The executor's core and the communicator over rdma (the header declares them extern).
namespace collectives {
template class executor_core<rdma>;
template class communicator<rdma>;
}  // namespace collectives
