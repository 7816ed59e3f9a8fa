// The hosts' log line and their exchange's timeout (hosts.hpp): inline in header-only
// use, compiled once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "hosts.hpp"

namespace collectives::detail {

std::string describe_hosts(std::span<const int> hosts) {
  const int count = hosts.empty() ? 0 : *std::max_element(hosts.begin(), hosts.end()) + 1;
  std::string text = std::to_string(count) + (count == 1 ? " host:" : " hosts:");
  for (int h = 0; h < count; ++h) {
    std::vector<int> ranks;
    for (std::size_t q = 0; q < hosts.size(); ++q)
      if (hosts[q] == h) ranks.push_back(int(q));
    text.append(h ? " | " : " ");
    for (std::size_t i = 0, j = 0; i < ranks.size(); i = ++j) {
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      if (i) text.push_back(',');
      text.append(std::to_string(ranks[i]));
      if (j > i) text.append("-").append(std::to_string(ranks[j]));
    }
  }
  return text;
}

error hosts_timed_out(const call_context& ctx, int rank, std::span<const std::uint64_t> all) {
  return exchange_timed_out(ctx, rank, "learning every rank's host (the algorithm plans by them)",
                            ranks_missing(int(all.size()), [&](int q) { return all[std::size_t(q)] == 0; }));
}

}  // namespace collectives::detail
