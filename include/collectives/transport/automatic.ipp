// automatic_transport's choice and start-up (automatic.hpp): inline in header-only
// use, compiled once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "automatic.hpp"

namespace collectives {

automatic_transport automatic_transport::join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                              automatic_options options) {
  const auto [use_shm, reason] = decide(launch, options.selection);
  if (log::enabled(log::level::info))
    log::info("rank " + std::to_string(launch.rank) + ": transport " + (use_shm ? "shm" : "tcp") + ": " + reason);
  if (use_shm) return automatic_transport(shm::join(launch, token, std::move(options.shm)));
  return automatic_transport(tcp::join(launch, token, std::move(options.tcp)));
}

automatic_transport::decision automatic_transport::decide(const bootstrap::launch_info& launch, transport_selection selection) {
  const std::string variable(transport_selection_variable);
  const bool all_here = launch.local_size == launch.size;
  const std::string here = "the launcher (" + launch.origin + ") puts " + std::to_string(launch.local_size) +
                           " of the job's " + std::to_string(launch.size) + " ranks on this host";
  switch (selection) {
    case transport_selection::shm:
      if (!all_here)
        throw error(errc::invalid_config, variable + "=shm, but " + here +
                                              ", and shared memory joins only ranks of one host; use tcp or auto");
      return {true, variable + "=shm"};
    case transport_selection::tcp:
      return {false, variable + "=tcp"};
    case transport_selection::automatic:
      break;
  }
  if (all_here) return {true, variable + "=auto and all " + std::to_string(launch.size) + " ranks are on this host"};
  return {false, variable + "=auto and " + here};
}


automatic_transport automatic_transport::from_env(automatic_options options) {
  const auto launch = bootstrap::detect_launch();  // first: an error in the launch comes alone
  return join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)), std::move(options));
}

}  // namespace collectives
