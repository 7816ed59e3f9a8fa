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
#include "../config.hpp"
#include "../error.hpp"

namespace collectives::detail {

// The cost file: "# comments", "transport NAME", then "on_host.latency_s 2.1e-05" and
// the like, one figure of each class per line. The figures after the first
// `required_cost_fields` may be missing (a file saved before they were measured).
inline constexpr std::pair<const char*, double link_costs::*> cost_fields[] = {
    {"latency_s", &link_costs::latency_s},
    {"per_message_s", &link_costs::per_message_s},
    {"seconds_per_byte", &link_costs::seconds_per_byte},
    {"reduce_seconds_per_byte", &link_costs::reduce_seconds_per_byte},
    {"memory_seconds_per_byte", &link_costs::memory_seconds_per_byte},
    {"copy_seconds_per_byte", &link_costs::copy_seconds_per_byte},
    {"middle_seconds_per_byte", &link_costs::middle_seconds_per_byte}};
inline constexpr std::size_t required_cost_fields = 4;

COLLECTIVES_DECL std::string cost_file_text(const link_classes& c, std::string_view transport, std::string_view how);

// Every figure of both classes, each once, each a finite number >= 0; or a clear error.
COLLECTIVES_DECL link_classes parse_cost_file(std::istream& in, const std::string& path, std::string& transport);
COLLECTIVES_DECL std::string describe_costs(const link_costs& c);

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "cost_file.ipp"
#endif
