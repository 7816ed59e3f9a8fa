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

#include "../config.hpp"
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
COLLECTIVES_DECL std::vector<std::string> hostlist_range(std::string_view group, std::size_t limit);

// Appends the names one item stands for, while `out` holds fewer than `limit`; false
// when the item is malformed.
COLLECTIVES_DECL bool expand_host_item(std::string_view item, std::string prefix, std::vector<std::string>& out,
                                       std::size_t limit);

}  // namespace detail

// The host names `list` stands for, in order, at most `limit` of them. A list that is
// not in Slurm's syntax is errc::invalid_config naming `variable`, its value and why.
COLLECTIVES_DECL std::vector<std::string> expand_hostlist(std::string_view variable, std::string_view list,
                                                          std::size_t limit = 1 << 16);

}  // namespace collectives::bootstrap

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "hostlist.ipp"
#endif
