// Diagnostics on stderr, one whole line per write so ranks' lines never interleave.
// Warnings (a refused connection, a lost peer) always print; COLLECTIVES_DEBUG=INFO
// also prints what each communicator set up and which algorithm each call kind chose.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "error.hpp"
#include "settings.hpp"

namespace collectives::log {

enum class level { warn = 1, info = 2 };

// A value COLLECTIVES_DEBUG does not accept is reported, not thrown: logging happens
// where an exception would do harm (while failing, in destructors).
inline level threshold() {
  static const level configured = [] {
    try {
      const auto word = settings::choice("COLLECTIVES_DEBUG").value_or("WARN");
      return word == "INFO" || word == "info" || word == "1" ? level::info : level::warn;
    } catch (const error& e) {
      const std::string line = std::string("collectives WARN: ") + e.what() + "; logging warnings only\n";
      std::fwrite(line.data(), 1, line.size(), stderr);
      return level::warn;
    }
  }();
  return configured;
}

inline bool enabled(level l) { return l <= threshold(); }

inline void write(level l, std::string_view line) {
  if (!enabled(l)) return;
  std::string text = l == level::warn ? "collectives WARN: " : "collectives INFO: ";
  text.append(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

inline void warn(std::string_view line) { write(level::warn, line); }
inline void info(std::string_view line) { write(level::info, line); }

}  // namespace collectives::log
