// Diagnostics on stderr, one whole line per write so ranks' lines never interleave.
// Warnings (a refused connection, a lost peer) always print; COLLECTIVES_DEBUG=INFO
// also prints what each communicator set up and which algorithm each call kind chose.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace collectives::log {

enum class level { warn = 1, info = 2 };

inline level threshold() {
  static const level configured = [] {
    const char* v = std::getenv("COLLECTIVES_DEBUG");
    if (v == nullptr) return level::warn;
    const std::string_view s{v};
    return s == "INFO" || s == "info" || s == "1" ? level::info : level::warn;
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
