// The log's threshold and its lines (log.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "log.hpp"

namespace collectives::log {

level configured_threshold() {
  try {
    return level_named(settings::choice("COLLECTIVES_DEBUG").value_or("WARN")).value_or(level::warn);
  } catch (const error& e) {
    const std::string line = std::string("collectives WARN: ") + e.what() + "; logging warnings only\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
    return level::warn;
  }
}

void write(level l, std::string_view line) {
  if (!enabled(l)) return;
  static constexpr std::string_view prefixes[] = {"", "collectives WARN: ", "collectives INFO: ", "collectives DEBUG: ",
                                                  "collectives TRACE: "};
  std::string text(prefixes[static_cast<int>(l)]);
  text.append(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace collectives::log
