// Slurm's host lists expanded (hostlist.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "hostlist.hpp"

namespace collectives::bootstrap {

std::vector<std::string> expand_hostlist(std::string_view variable, std::string_view list,
                                         std::size_t limit) {
  const auto refuse = [&](std::string_view why) {
    return error(errc::invalid_config, std::string(variable).append("=").append(list).append(
                                           " is not a Slurm host list (expected names like node[01-03,07],gpu5): ")
                                           .append(why));
  };
  bool balanced = true;
  const auto items = detail::hostlist_items(list, balanced);
  if (!balanced) throw refuse("unbalanced brackets");
  std::vector<std::string> hosts;
  for (const auto item : items) {
    if (item.empty()) throw refuse("an empty name");
    if (!detail::expand_host_item(item, {}, hosts, limit))
      throw refuse(std::string("'").append(item).append("' has a bracket that is not a range of numbers"));
    if (hosts.size() >= limit) break;
  }
  return hosts;
}

std::vector<std::string> detail::hostlist_range(std::string_view group, std::size_t limit) {
  std::vector<std::string> values;
  while (values.size() < limit) {
    const auto comma = group.find(',');
    const auto part = group.substr(0, comma);
    const auto dash = part.find('-');
    const auto low = part.substr(0, dash);
    const auto high = dash == std::string_view::npos ? low : part.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high) || digits_value(high) < digits_value(low)) return {};
    for (long long v = digits_value(low); v <= digits_value(high) && values.size() < limit; ++v) {
      std::string text = std::to_string(v);
      if (text.size() < low.size()) text.insert(0, low.size() - text.size(), '0');
      values.push_back(std::move(text));
    }
    if (comma == std::string_view::npos) break;
    group.remove_prefix(comma + 1);
  }
  return values;
}

bool detail::expand_host_item(std::string_view item, std::string prefix, std::vector<std::string>& out,
                              std::size_t limit) {
  const auto open = item.find('[');
  if (open == std::string_view::npos) {
    if (out.size() < limit) out.push_back(prefix.append(item));
    return true;
  }
  const auto close = item.find(']', open);
  if (close == std::string_view::npos) return false;
  prefix.append(item.substr(0, open));
  const auto values = hostlist_range(item.substr(open + 1, close - open - 1), limit);
  if (values.empty()) return false;
  for (const auto& value : values) {
    if (out.size() >= limit) break;
    if (!expand_host_item(item.substr(close + 1), prefix + value, out, limit)) return false;
  }
  return true;
}

}  // namespace collectives::bootstrap
