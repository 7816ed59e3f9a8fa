// The rdma transport's factories for the conformance suite, over libfabric's two
// software providers: tcp (tcp;ofi_rxm) and shm. Built into their own binary,
// rdma_conformance_test, which links libfabric (conformance_test.cpp).
#pragma once

#include <collectives/transport/rdma.hpp>

#include "factories.hpp"

namespace conformance {

// Ranks meet through a file store, as tcp's do.
template <const char* Provider>
struct rdma_factory : host_messages<coll::rdma> {
  struct make {
    coll::rdma operator()(int rank, int size, coll::bootstrap::file_store& store) const {
      coll::rdma_options o;
      o.provider = Provider;
      o.startup_timeout = startup_limit;
      return coll::rdma(rank, size, store, o, false);
    }
  };
  struct group : file_store_group<coll::rdma, make> {
    explicit group(int size) : file_store_group<coll::rdma, make>(size, "rdma") {}
  };
};

inline constexpr char tcp_provider[] = "tcp";
inline constexpr char shm_provider[] = "shm";
struct rdma_tcp_factory : rdma_factory<tcp_provider> {
  static constexpr const char* name = "rdma over libfabric's tcp provider";
};
struct rdma_shm_factory : rdma_factory<shm_provider> {
  static constexpr const char* name = "rdma over libfabric's shm provider";
};

}  // namespace conformance
