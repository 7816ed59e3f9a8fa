// A transport chosen when the job starts: shared memory when every rank of the job
// is on this host; across hosts, RDMA where the program has it (it includes
// <collectives/transport/rdma.hpp> and links collectives::rdma) and libfabric offers a
// hardware provider, else TCP; or whichever COLLECTIVES_TRANSPORT names. One program
// binary then runs well on one host and across hosts. Link with collectives::tcp (it
// contains shm and tcp).
//
//   auto comm = collectives::communicator<collectives::automatic_transport>::from_env();
//
// COLLECTIVES_TRANSPORT = auto (the default) | shm | tcp | rdma. `auto` decides from
// what the launcher says: shm when LOCAL_WORLD_SIZE equals WORLD_SIZE (or Open MPI's or
// Slurm's equivalents), otherwise rdma on a hardware fabric provider, else tcp. Every
// rank must come to the same answer, or ranks of different transports wait for each
// other until the start-up deadline; launchers tell every rank the same sizes, so this
// holds unless a rank's environment differs (set COLLECTIVES_TRANSPORT explicitly then).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../bootstrap/environment.hpp"
#include "../../bootstrap/job_token.hpp"
#include "../../concepts/transport.hpp"
#include "../../config.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "../declarations.hpp"
#include "../detail/plugged_transport.hpp"
#include "../selection.hpp"
#include "../shm/options.hpp"
#include "../tcp/options.hpp"

namespace collectives {

struct automatic_options {
  transport_selection selection = transport_selection::automatic;
  shm_options shm{};
  tcp_options tcp{};

  // COLLECTIVES_TRANSPORT, and each transport's own variables.
  static automatic_options from_env() {
    return {.selection = selected_transport(), .shm = shm_options::from_env(), .tcp = tcp_options::from_env()};
  }
};

class automatic_transport {
 public:
  // shm, tcp and rdma share their request type (the slot of an operation in their
  // matching engine), so a request passes through as it is.
  using request = transport_detail::slot_request;

  // The transport in use, plugged in: this header then needs neither shm's nor tcp's
  // (their constructors below are compiled with transport.ipp). A call crosses one
  // virtual function on its way to the engine, beside a system call or a copy.
  COLLECTIVES_DECL explicit automatic_transport(shm t);
  COLLECTIVES_DECL explicit automatic_transport(tcp t);
  // A transport plugged in by its own header (rdma).
  explicit automatic_transport(std::unique_ptr<transport_detail::plugged_transport> t) : chosen_(std::move(t)) {}

  // Joins the job `launch` describes over the transport `options.selection` asks for.
  COLLECTIVES_DECL static automatic_transport join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                                   automatic_options options = automatic_options::from_env());

  // The job as the launcher described it, and COLLECTIVES_JOB_TOKEN.
  COLLECTIVES_DECL static automatic_transport from_env(automatic_options options = automatic_options::from_env());

  // "shm", "tcp" or "rdma".
  std::string_view name() const noexcept { return chosen_->name(); }
  std::string describe() const { return chosen_->describe(); }
  // The automatic algorithm's figures are those of the transport in use.
  link_costs current_costs() const { return chosen_->costs(); }

  // Over shm every rank is on this host; tcp and rdma know them from their start-up
  // (hosts_known_to).
  std::vector<int> hosts() const { return chosen_->hosts(); }

  int rank() const { return chosen_->rank(); }
  int size() const { return chosen_->size(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) { return chosen_->post_send(peer, tag, data); }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return chosen_->post_recv(peer, tag, into); }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return chosen_->post_recv_reduce(peer, tag, bytes, granule, sink);
  }
  bool test(request& r) { return chosen_->test(r); }
  bool wait_for_activity(deadline until) { return chosen_->wait_for_activity(until); }
  void cancel(request& r) noexcept { chosen_->cancel(r); }
  void abort() { chosen_->abort(); }
  void note_failure(std::string_view what) noexcept { chosen_->note_failure(what); }
  // The survivors' group, over the same kind of transport (docs/fault-tolerance.md);
  // shm and tcp only.
  automatic_transport shrink(deadline until) { return automatic_transport(chosen_->shrink(until)); }

 private:
  struct decision {
    transport_selection use;  // shm, tcp or rdma
    std::string reason;
  };

  COLLECTIVES_DECL static decision decide(const bootstrap::launch_info& launch, transport_selection selection);

  std::unique_ptr<transport_detail::plugged_transport> chosen_;
};

}  // namespace collectives

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "transport.ipp"
#endif
