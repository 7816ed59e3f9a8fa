// collectives::compiled's RDMA part, built where libfabric is found (see
// <collectives/impl/rdma_src.hpp>). It is an object of its own in the archive: a
// program that never includes <collectives/transport/rdma.hpp> does not link it, and
// needs no libfabric.
#include <collectives/impl/rdma_src.hpp>
