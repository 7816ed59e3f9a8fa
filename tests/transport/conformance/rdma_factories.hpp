// The rdma transport's factories for the conformance suite, over libfabric's two
// software providers: tcp (tcp;ofi_rxm) and shm. Built into their own binary,
// rdma_conformance_test, which links libfabric (conformance_test.cpp).
#pragma once

#include <collectives/transport/rdma.hpp>

#include "factories.hpp"

namespace conformance {

// Ranks meet through a file store, as tcp's do, which a forked rank shares too.
template <const char* Provider>
struct rdma_factory : host_messages<coll::rdma> {
  class group {
   public:
    explicit group(int size) : size_(size) {}
    group(const group&) = delete;
    group& operator=(const group&) = delete;
    ~group() {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
    coll::rdma join(int rank) {
      coll::bootstrap::file_store store(dir_);
      coll::rdma_options o;
      o.provider = Provider;
      o.startup_timeout = startup_limit;
      return coll::rdma(rank, size_, store, o, false);
    }

   private:
    int size_;
    std::filesystem::path dir_ = std::filesystem::temp_directory_path() / fresh_name("rdma");
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
