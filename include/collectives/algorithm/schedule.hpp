// The helpers the algorithms share to build schedules. The schedule types themselves
// (schedule, operation, region, plan_request) are in concepts/schedule.hpp; including
// this header still brings them.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "../concepts/schedule.hpp"

namespace collectives {

// Helpers the algorithms share.
namespace plan {

// Splits `count` elements into `parts` nearly equal chunks; the first count % parts
// chunks get one more. Returns chunk `i`'s offset and size.
struct span_of_elements {
  std::size_t offset;
  std::size_t count;
};
inline span_of_elements even_chunk(std::size_t count, int parts, int i) {
  const std::size_t p = static_cast<std::size_t>(parts), k = static_cast<std::size_t>(i);
  const std::size_t base = count / p, extra = count % p;
  return {k * base + (k < extra ? k : extra), base + (k < extra ? 1 : 0)};
}

// The sizes of even_chunk's `parts` chunks of `count` elements: an even split as the
// per-rank counts that the v-forms' plans take.
inline std::vector<std::size_t> even_chunk_counts(std::size_t count, int parts) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(parts));
  for (int i = 0; i < parts; ++i) counts[static_cast<std::size_t>(i)] = even_chunk(count, parts, i).count;
  return counts;
}

// Prefix sums: displacement of chunk i in a packed layout of `counts`.
inline std::vector<std::size_t> displacements(std::span<const std::size_t> counts) {
  std::vector<std::size_t> d(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) d[i + 1] = d[i] + counts[i];
  return d;
}

inline std::size_t slice_elements(const plan_request& r) {
  const std::size_t n = r.slice_bytes / (r.element_size ? r.element_size : 1);
  return n ? n : 1;
}

inline std::size_t slice_count(std::size_t count, std::size_t slice) { return count ? (count + slice - 1) / slice : 1; }

// Slice `k` of a region cut into pieces of `slice` elements (the last may be short).
inline region slice_of(region r, std::size_t slice, std::size_t k) {
  const std::size_t begin = k * slice < r.count ? k * slice : r.count;
  const std::size_t end = begin + slice < r.count ? begin + slice : r.count;
  return {r.buffer, r.offset + begin, end - begin};
}

inline int mod(int a, int p) { return ((a % p) + p) % p; }

// The bytes a call moves per rank (per chunk for the P*N collectives), for the costs.
inline double bytes_of(const plan_request& r) { return double(r.count) * double(r.element_size); }

// The same for the collectives that move one part per rank: a v-form's largest part.
inline double largest_part_bytes(const plan_request& r) {
  if (r.counts.empty()) return bytes_of(r);
  double bytes = 0;
  for (auto c : r.counts) bytes = std::fmax(bytes, double(c) * double(r.element_size));
  return bytes;
}

}  // namespace plan
}  // namespace collectives
