// Slurm's compressed host lists, as in SLURM_JOB_NODELIST: "node[01-03,07],gpu5" is
// node01, node02, node03, node07 and gpu5. A name may hold several bracket groups
// ("rack[1-2]-n[1-2]": rack1-n1, rack1-n2, rack2-n1, rack2-n2, the last group varying
// fastest, as scontrol show hostnames lists them), and a range keeps the zero padding
// of its lower bound.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"

namespace collectives::bootstrap {

namespace detail {

// Splits at commas outside brackets.
inline std::vector<std::string_view> hostlist_items(std::string_view list, bool& balanced) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  balanced = true;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '[' && ++depth > 1) balanced = false;
    if (list[i] == ']' && --depth < 0) balanced = false;
    if (list[i] == ',' && depth == 0) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) balanced = false;
  items.push_back(list.substr(start));
  return items;
}

inline bool all_digits(std::string_view text) {
  if (text.empty() || text.size() > 18) return false;  // 18 digits fit a long long
  for (const char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

inline long long digits_value(std::string_view text) {
  long long value = 0;
  for (const char c : text) value = value * 10 + (c - '0');
  return value;
}

// The values of one bracket group's contents ("01-03,7"), as text, at most `limit`.
// Empty when malformed.
inline std::vector<std::string> hostlist_range(std::string_view group, std::size_t limit) {
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

// Appends the names one item stands for, while `out` holds fewer than `limit`; false
// when the item is malformed.
inline bool expand_host_item(std::string_view item, std::string prefix, std::vector<std::string>& out,
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

}  // namespace detail

// The host names `list` stands for, in order, at most `limit` of them. A list that is
// not in Slurm's syntax is errc::invalid_config naming `variable`, its value and why.
inline std::vector<std::string> expand_hostlist(std::string_view variable, std::string_view list,
                                                std::size_t limit = 1 << 16) {
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

}  // namespace collectives::bootstrap
