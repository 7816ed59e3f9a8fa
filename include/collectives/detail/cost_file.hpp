// The file of link costs that COLLECTIVES_TUNE=1 saves and COLLECTIVES_TUNE_FILE
// reads (docs/tuning.md), and the figures as the INFO log shows them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <istream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../concepts/vocabulary.hpp"
#include "../error.hpp"

namespace collectives::detail {

// The cost file: "# comments", "transport NAME", then "on_host.latency_s 2.1e-05" and
// the like, one figure of each class per line.
inline constexpr std::pair<const char*, double link_costs::*> cost_fields[] = {
    {"latency_s", &link_costs::latency_s},
    {"per_message_s", &link_costs::per_message_s},
    {"seconds_per_byte", &link_costs::seconds_per_byte},
    {"reduce_seconds_per_byte", &link_costs::reduce_seconds_per_byte}};

inline std::string cost_file_text(const link_classes& c, std::string_view transport, std::string_view how) {
  std::ostringstream out;
  out.precision(6);
  out << "# collectives link costs: " << how << "\ntransport " << transport << '\n';
  for (auto [name, field] : cost_fields) out << "on_host." << name << ' ' << c.on_host.*field << '\n';
  for (auto [name, field] : cost_fields) out << "across_hosts." << name << ' ' << c.across_hosts.*field << '\n';
  return out.str();
}

// Every figure of both classes, each once, each a finite number >= 0; or a clear error.
inline link_classes parse_cost_file(std::istream& in, const std::string& path, std::string& transport) {
  link_classes c;
  std::vector<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key) || key[0] == '#') continue;
    const auto bad = [&](const std::string& why) {
      return error(errc::invalid_config, "COLLECTIVES_TUNE_FILE " + path + ", line " + std::to_string(number) + ": " + why);
    };
    if (!(words >> value) || (words >> extra)) throw bad("expected a name and one value");
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw bad(key + " is given twice");
    seen.push_back(key);
    if (key == "transport") {
      transport = value;
      continue;
    }
    const auto dot = key.find('.');
    link_costs* cls = key.substr(0, dot) == "on_host" ? &c.on_host : key.substr(0, dot) == "across_hosts" ? &c.across_hosts : nullptr;
    const auto field = std::find_if(std::begin(cost_fields), std::end(cost_fields),
                                    [&](const auto& f) { return dot != std::string::npos && key.substr(dot + 1) == f.first; });
    if (!cls || field == std::end(cost_fields)) throw bad("unknown figure " + key);
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    if (*end || !std::isfinite(x) || x < 0) throw bad(key + " must be a number >= 0, not " + value);
    cls->*(field->second) = x;
  }
  const std::size_t expected = 1 + 2 * std::size(cost_fields);
  if (seen.size() != expected)
    throw error(errc::invalid_config, "COLLECTIVES_TUNE_FILE " + path + " has " + std::to_string(seen.size()) + " of its " +
                                          std::to_string(expected) + " lines (a transport and 4 figures of each class); "
                                          "save it again with COLLECTIVES_TUNE=1");
  return c;
}

inline std::string describe_costs(const link_costs& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%.3g us latency, %.3g us per message, %.3g GB/s, reductions %.3g GB/s",
                c.latency_s * 1e6, c.per_message_s * 1e6, 1e-9 / c.seconds_per_byte, 1e-9 / c.reduce_seconds_per_byte);
  return text;
}

}  // namespace collectives::detail
