// Diagnostics on stderr, one whole line per write so ranks' lines never interleave.
// Warnings (a refused connection, a lost peer) always print. COLLECTIVES_DEBUG raises
// the level: INFO also prints what each communicator set up and which algorithm each
// call kind chose; DEBUG every call as it ends (bytes, time); TRACE every step of
// every call (each message posted and completed, each reduction and copy).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "config.hpp"
#include "error.hpp"
#include "settings.hpp"

namespace collectives::log {

enum class level { warn = 1, info = 2, debug = 3, trace = 4 };

// The level a COLLECTIVES_DEBUG word names, in either case, or by its number from 0.
inline std::optional<level> level_named(std::string_view word) {
  static constexpr std::pair<std::string_view, level> names[] = {
      {"WARN", level::warn}, {"warn", level::warn}, {"0", level::warn},   {"INFO", level::info},
      {"info", level::info}, {"1", level::info},    {"DEBUG", level::debug}, {"debug", level::debug},
      {"TRACE", level::trace}, {"trace", level::trace}, {"2", level::debug}, {"3", level::trace}};
  for (const auto& [name, l] : names)
    if (word == name) return l;
  return std::nullopt;
}

// COLLECTIVES_DEBUG's level. A value it does not accept is reported, not thrown:
// logging happens where an exception would do harm (while failing, in destructors).
COLLECTIVES_DECL level configured_threshold();

// Read once; inline, as every call asks.
inline level threshold() {
  static const level configured = configured_threshold();
  return configured;
}

inline bool enabled(level l) { return l <= threshold(); }

COLLECTIVES_DECL void write(level l, std::string_view line);

inline void warn(std::string_view line) { write(level::warn, line); }
inline void info(std::string_view line) { write(level::info, line); }
inline void debug(std::string_view line) { write(level::debug, line); }
inline void trace(std::string_view line) { write(level::trace, line); }

}  // namespace collectives::log

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "log.ipp"
#endif
