// automatic_transport's choice and start-up (transport.hpp): inline in header-only
// use, compiled once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "transport.hpp"
#include "../shm/transport.hpp"
#include "../tcp/transport.hpp"

namespace collectives {

automatic_transport::automatic_transport(shm t) : chosen_(std::make_unique<transport_detail::plugged<shm>>(std::move(t))) {}
automatic_transport::automatic_transport(tcp t) : chosen_(std::make_unique<transport_detail::plugged<tcp>>(std::move(t))) {}

automatic_transport automatic_transport::join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                              automatic_options options) {
  const auto [use, reason] = decide(launch, options.selection);
  if (log::enabled(log::level::info))
    log::info("rank " + std::to_string(launch.rank) + ": transport " + std::string(to_string(use)) + ": " + reason);
  switch (use) {
    case transport_selection::shm: return automatic_transport(shm::join(launch, token, std::move(options.shm)));
    case transport_selection::rdma: return automatic_transport(transport_detail::rdma_socket().join(launch, token));
    default: return automatic_transport(tcp::join(launch, token, std::move(options.tcp)));
  }
}

automatic_transport::decision automatic_transport::decide(const bootstrap::launch_info& launch, transport_selection selection) {
  const std::string variable(transport_selection_variable);
  const bool all_here = launch.local_size == launch.size;
  const std::string here = "the launcher (" + launch.origin + ") puts " + std::to_string(launch.local_size) +
                           " of the job's " + std::to_string(launch.size) + " ranks on this host";
  const auto& rdma = transport_detail::rdma_socket();
  switch (selection) {
    case transport_selection::shm:
      if (!all_here)
        throw error(errc::invalid_config, variable + "=shm, but " + here +
                                              ", and shared memory joins only ranks of one host; use tcp, rdma or auto");
      return {transport_selection::shm, variable + "=shm"};
    case transport_selection::tcp:
      return {transport_selection::tcp, variable + "=tcp"};
    case transport_selection::rdma:
      if (!rdma.join)
        throw error(errc::invalid_config, variable + "=rdma, but this program was built without the rdma transport: "
                                                     "include <collectives/transport/rdma.hpp> and link collectives::rdma "
                                                     "(libfabric, docs/rdma.md)");
      return {transport_selection::rdma, variable + "=rdma"};
    case transport_selection::automatic:
      break;
  }
  if (all_here)
    return {transport_selection::shm, variable + "=auto and all " + std::to_string(launch.size) + " ranks are on this host"};
  if (rdma.join && rdma.hardware_present())
    return {transport_selection::rdma, variable + "=auto, " + here + ", and libfabric offers a hardware provider"};
  return {transport_selection::tcp, variable + "=auto and " + here +
                                        (rdma.join ? " (libfabric offers no hardware provider here)" : "")};
}


automatic_transport automatic_transport::from_env(automatic_options options) {
  const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
  return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
}

}  // namespace collectives
