// How a transport is named in COLLECTIVES_TRANSPORT. A transport that a job can ask
// for by name publishes it as `static constexpr std::string_view selection_name`
// (shm: "shm", tcp: "tcp"); the communicator reads it here, so it names no transport
// itself. The variable's values are parsed in transport/selection.hpp.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "../log.hpp"
#include "../settings.hpp"

namespace collectives {

inline constexpr std::string_view transport_selection_variable = "COLLECTIVES_TRANSPORT";

// The name COLLECTIVES_TRANSPORT has for a transport type; empty for those it can't name.
template <class Transport>
inline constexpr std::string_view selectable_name{};
template <class Transport>
  requires requires { { Transport::selection_name } -> std::convertible_to<std::string_view>; }
inline constexpr std::string_view selectable_name<Transport> = Transport::selection_name;

// For a program that chose its transport in code (communicator<tcp>, communicator<shm>):
// the program's choice wins, but an environment that asks for another one deserves a
// word, or a user who set COLLECTIVES_TRANSPORT=shm would think it took effect.
inline void warn_if_other_transport_selected(std::string_view used) {
  const auto v = settings::value_of(transport_selection_variable);
  if (!v || *v == "auto" || *v == used) return;
  log::warn(settings::assignment(transport_selection_variable, *v) + " is ignored: this program uses the " +
            std::string(used) + " transport in its code (communicator<" + std::string(used) +
            ">); only communicator<automatic_transport> follows the variable");
}

}  // namespace collectives
