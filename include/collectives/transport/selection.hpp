// COLLECTIVES_TRANSPORT: which transport a job asks for, read by automatic_transport
// (transport/automatic.hpp) and checked by communicator<shm>::from_env() and
// communicator<tcp>::from_env(), so that a program that fixed its transport in code
// says so when the environment asks for another. Plain standard C++: the launcher
// validates its --transport with it too.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../error.hpp"
#include "../log.hpp"

namespace collectives {

enum class transport_selection {
  automatic,  // shm when every rank of the job is on this host, tcp otherwise
  shm,
  tcp,
};

class shm;
class tcp;

// The name COLLECTIVES_TRANSPORT has for a transport type; empty for those it can't name.
template <class Transport>
inline constexpr std::string_view selectable_name{};
template <>
inline constexpr std::string_view selectable_name<shm> = "shm";
template <>
inline constexpr std::string_view selectable_name<tcp> = "tcp";

inline constexpr std::string_view transport_selection_variable = "COLLECTIVES_TRANSPORT";
inline constexpr std::string_view transport_selection_values = "auto, shm or tcp";

inline std::optional<transport_selection> parse_transport_selection(std::string_view text) {
  if (text == "auto") return transport_selection::automatic;
  if (text == "shm") return transport_selection::shm;
  if (text == "tcp") return transport_selection::tcp;
  return std::nullopt;
}

inline std::string_view to_string(transport_selection s) {
  switch (s) {
    case transport_selection::automatic: return "auto";
    case transport_selection::shm: return "shm";
    case transport_selection::tcp: return "tcp";
  }
  return "?";
}

// COLLECTIVES_TRANSPORT, `auto` when unset or empty; any other value is
// errc::invalid_config naming it, since a typo would otherwise pick a transport silently.
inline transport_selection selected_transport() {
  const char* v = std::getenv(transport_selection_variable.data());
  if (v == nullptr || *v == '\0') return transport_selection::automatic;
  if (const auto s = parse_transport_selection(v)) return *s;
  throw error(errc::invalid_config, std::string(transport_selection_variable) + "=" + v + " is not a transport; " +
                                        "expected " + std::string(transport_selection_values));
}

// For a program that chose its transport in code (communicator<tcp>, communicator<shm>):
// the program's choice wins, but an environment that asks for another one deserves a
// word, or a user who set COLLECTIVES_TRANSPORT=shm would think it took effect.
inline void warn_if_other_transport_selected(std::string_view used) {
  const char* v = std::getenv(transport_selection_variable.data());
  if (v == nullptr || *v == '\0' || std::string_view(v) == "auto" || std::string_view(v) == used) return;
  log::warn(std::string(transport_selection_variable) + "=" + v + " is ignored: this program uses the " +
            std::string(used) + " transport in its code (communicator<" + std::string(used) +
            ">); only communicator<automatic_transport> follows the variable");
}

}  // namespace collectives
