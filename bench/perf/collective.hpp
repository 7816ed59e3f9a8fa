// The collectives the perf programs time, what each one's buffers look like, and the
// bus-bandwidth factor that makes their figures comparable (DESIGN.md, "The
// collectives"). Plain standard C++: the Open MPI twin uses it too.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace perf {

enum class collective { all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, gather, scatter };

inline constexpr collective all_collectives[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                                 collective::broadcast,  collective::reduce,     collective::all_to_all,
                                                 collective::gather,     collective::scatter};

constexpr std::string_view name_of(collective c) {
  switch (c) {
    case collective::all_reduce: return "all_reduce";
    case collective::all_gather: return "all_gather";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::all_to_all: return "all_to_all";
    case collective::gather: return "gather";
    case collective::scatter: return "scatter";
  }
  return "?";
}

// "all_reduce", "all_reduce_perf" or "mpi_all_reduce_perf" (how the programs are named
// on disk), so one binary can dispatch on argv[0] or on its first argument.
inline std::optional<collective> collective_named(std::string_view name) {
  if (const auto slash = name.rfind('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  if (name.starts_with("mpi_")) name.remove_prefix(4);
  if (name.ends_with("_perf")) name.remove_suffix(5);
  for (collective c : all_collectives)
    if (name == name_of(c)) return c;
  return std::nullopt;
}

constexpr bool reduces(collective c) {
  return c == collective::all_reduce || c == collective::reduce_scatter || c == collective::reduce;
}
constexpr bool has_root(collective c) {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather || c == collective::scatter;
}
// The larger buffer holds one part per rank, so its element count is a multiple of P.
constexpr bool split_in_parts(collective c) {
  return c == collective::all_gather || c == collective::reduce_scatter || c == collective::all_to_all ||
         c == collective::gather || c == collective::scatter;
}
// Only the root's output is defined (and checked).
constexpr bool result_on_root_only(collective c) { return c == collective::reduce || c == collective::gather; }

// nccl-tests' convention: busbw = algbw * factor, so that every collective's figure is
// the bandwidth each rank's link sustains, comparable with the hardware's peak.
inline double bus_bandwidth_factor(collective c, int ranks) {
  const double p = ranks;
  switch (c) {
    case collective::all_reduce: return 2.0 * (p - 1) / p;
    case collective::broadcast:
    case collective::reduce: return 1.0;
    default: return (p - 1) / p;
  }
}

inline std::string bus_bandwidth_formula(collective c) {
  switch (c) {
    case collective::all_reduce: return "2(P-1)/P";
    case collective::broadcast:
    case collective::reduce: return "1";
    default: return "(P-1)/P";
  }
}

// One rank's buffers for a call whose larger buffer has `count` elements (nccl-tests'
// "count" column): `part` is one rank's share of a collective split in parts.
struct layout {
  std::size_t count = 0, part = 0;
  std::size_t input = 0, output = 0;  // out-of-place element counts on this rank
  std::size_t in_place = 0;           // the one buffer of the in-place form
};

inline layout layout_of(collective c, std::size_t count, int ranks, int rank, int root) {
  const auto p = static_cast<std::size_t>(ranks);
  const bool is_root = rank == root;
  layout l{.count = count, .part = split_in_parts(c) ? count / p : count};
  switch (c) {
    case collective::all_reduce: l.input = l.output = count; break;
    case collective::broadcast: l.input = is_root ? count : 0; l.output = count; break;
    case collective::reduce: l.input = count; l.output = is_root ? count : 0; break;
    case collective::all_gather: l.input = l.part; l.output = count; break;
    case collective::reduce_scatter: l.input = count; l.output = l.part; break;
    case collective::all_to_all: l.input = l.output = count; break;
    case collective::gather: l.input = l.part; l.output = is_root ? count : 0; break;
    case collective::scatter: l.input = is_root ? count : 0; l.output = l.part; break;
  }
  l.in_place = count;  // in-place forms take the whole buffer on every rank
  return l;
}

}  // namespace perf
