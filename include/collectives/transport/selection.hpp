// COLLECTIVES_TRANSPORT: which transport a job asks for, read by automatic_transport
// (transport/automatic.hpp). communicator<shm>::from_env() and communicator<tcp>::from_env()
// check it too (concepts/transport_selection.hpp), so that a program that fixed its
// transport in code says so when the environment asks for another. Plain standard
// C++: the launcher validates its --transport with it too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "../concepts/transport_selection.hpp"
#include "../error.hpp"
#include "../settings.hpp"

namespace collectives {

enum class transport_selection {
  automatic,  // shm when every rank of the job is on this host, else rdma on a hardware fabric, else tcp
  shm,
  tcp,
  rdma,
};

inline constexpr std::string_view transport_selection_values = "auto, shm, tcp or rdma";

inline std::optional<transport_selection> parse_transport_selection(std::string_view text) {
  if (text == "auto") return transport_selection::automatic;
  if (text == "shm") return transport_selection::shm;
  if (text == "tcp") return transport_selection::tcp;
  if (text == "rdma") return transport_selection::rdma;
  return std::nullopt;
}

inline std::string_view to_string(transport_selection s) {
  switch (s) {
    case transport_selection::automatic: return "auto";
    case transport_selection::shm: return "shm";
    case transport_selection::tcp: return "tcp";
    case transport_selection::rdma: return "rdma";
  }
  return "?";
}

// COLLECTIVES_TRANSPORT, `auto` when unset or empty; any other value is
// errc::invalid_config naming it, since a typo would otherwise pick a transport silently.
inline transport_selection selected_transport() {
  return *parse_transport_selection(settings::choice("COLLECTIVES_TRANSPORT").value_or("auto"));
}

}  // namespace collectives
