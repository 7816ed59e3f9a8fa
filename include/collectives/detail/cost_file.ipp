// The cost file's text (cost_file.hpp): inline in header-only use, compiled once into
// collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "cost_file.hpp"

namespace collectives::detail {

std::string cost_file_text(const link_classes& c, std::string_view transport, std::string_view how) {
  std::ostringstream out;
  out.precision(6);
  out << "# collectives link costs: " << how << "\ntransport " << transport << '\n';
  for (auto [name, field] : cost_fields) out << "on_host." << name << ' ' << c.on_host.*field << '\n';
  for (auto [name, field] : cost_fields) out << "across_hosts." << name << ' ' << c.across_hosts.*field << '\n';
  return out.str();
}

link_classes parse_cost_file(std::istream& in, const std::string& path, std::string& transport) {
  link_classes c;
  std::vector<std::string> seen;
  std::size_t required = 0;  // lines of the figures every file has
  bool has_transport = false;
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
      has_transport = true;
      continue;
    }
    const auto dot = key.find('.');
    link_costs* cls = key.substr(0, dot) == "on_host" ? &c.on_host : key.substr(0, dot) == "across_hosts" ? &c.across_hosts : nullptr;
    const auto field = std::find_if(std::begin(cost_fields), std::end(cost_fields),
                                    [&](const auto& f) { return dot != std::string::npos && key.substr(dot + 1) == f.first; });
    if (!cls || field == std::end(cost_fields)) throw bad("unknown figure " + key);
    required += field - std::begin(cost_fields) < std::ptrdiff_t(required_cost_fields);
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    if (*end || !std::isfinite(x) || x < 0) throw bad(key + " must be a number >= 0, not " + value);
    cls->*(field->second) = x;
  }
  const std::size_t expected = 2 * required_cost_fields;
  if (required != expected || !has_transport)
    throw error(errc::invalid_config, "COLLECTIVES_TUNE_FILE " + path + " has " + std::to_string(required + has_transport) +
                                          " of its " + std::to_string(1 + expected) +
                                          " lines (a transport and 4 figures of each class); save it again with COLLECTIVES_TUNE=1");
  return c;
}

std::string describe_costs(const link_costs& c) {
  char text[200];
  std::snprintf(text, sizeof text, "%.3g us latency, %.3g us per message, %.3g GB/s, reductions %.3g GB/s",
                c.latency_s * 1e6, c.per_message_s * 1e6, 1e-9 / c.seconds_per_byte, 1e-9 / c.reduce_seconds_per_byte);
  std::string words = text;
  // The figures measured only by later versions, where the file has them.
  for (auto [figure, what] : {std::pair{c.middle_seconds_per_byte, " GB/s at 4 MiB"},
                              std::pair{c.memory_seconds_per_byte, " GB/s from memory"},
                              std::pair{c.copy_seconds_per_byte, " GB/s copies"}})
    if (figure > 0) {
      std::snprintf(text, sizeof text, ", %.3g", 1e-9 / figure);
      words += text;
      words += what;
    }
  return words;
}

}  // namespace collectives::detail
