// The collective tests' values: the parameter grid, input values whose reductions are
// exact in any order, user ops, and a serial reference. Needs no ranks (harness.hpp
// adds them).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <collectives/collectives.hpp>

#include "user_types.hpp"

namespace coll = collectives;

namespace testing {

// The large case: 2^19+3 elements, past the sizes the library switches on, in every
// element size the grids use (4, 8 and 16 bytes: 2, 4 and 8 MiB): shm's 64 KiB slots,
// tcp's 64 KiB early limit and 256 KiB pieces, rdma's 1 MiB reads, the workspace's
// 1 MiB kept, several 512 KiB pipeline slices, and from 8 bytes up hierarchical's
// 2 MiB pieces. (It was 2^20+3: each size that crosses, this crosses too in one
// element size or more, in half the time.)
inline constexpr std::size_t large_count = (std::size_t{1} << 19) + 3;

// 0, 1, 7, P-1, P, 1000 and the large case (unless `with_large` is false), without repeats.
inline std::vector<std::size_t> element_counts(int p, bool with_large = true) {
  std::vector<std::size_t> n{0, 1, 7, std::size_t(p - 1), std::size_t(p), 1000};
  if (with_large) n.push_back(large_count);
  std::sort(n.begin(), n.end());
  n.erase(std::unique(n.begin(), n.end()), n.end());
  return n;
}

// Per-rank chunk counts for collectives whose buffers hold P chunks (gather,
// all_gather, reduce_scatter, all_to_all, ...): the same grid, except that the large
// case is the chunk that makes one rank's P-chunk buffer the large count or just more.
inline std::vector<std::size_t> chunk_counts(int p, bool with_large = true) {
  auto n = element_counts(p, with_large);
  std::replace(n.begin(), n.end(), large_count, (large_count + std::size_t(p) - 1) / std::size_t(p));
  return n;
}

// ---- inputs --------------------------------------------------------------------

inline std::uint64_t mix(int rank, std::size_t i) {
  std::uint64_t h = (std::uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (std::uint64_t(i) + 7) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

// Element i of rank `rank`'s input, chosen so that reducing any number of ranks in
// any order is exact: small integers for sums, factors of magnitude <= 2 for
// products, anything for min, max and the bitwise ops.
template <class T, class Op>
T input_value(int rank, std::size_t i) {
  if constexpr (std::is_same_v<T, mat2>) {
    const auto h = mix(rank, i);
    return {std::int64_t(h % 3) - 1, std::int64_t(h / 3 % 3) - 1, std::int64_t(h / 9 % 3) - 1, std::int64_t(h / 27 % 3) - 1};
  } else if constexpr (std::is_same_v<T, scored>) {
    return {double(mix(rank, i) % 50), std::int64_t(rank) * 10'000'000 + std::int64_t(i)};
  } else if constexpr (std::is_same_v<Op, coll::sum> || std::is_same_v<Op, coll::avg>) {
    return T(int((std::size_t(rank) * 5 + i * 3) % 17) - 8);
  } else if constexpr (std::is_same_v<Op, coll::prod>) {
    static constexpr int factors[] = {1, -1, 2, 1, -2, 1, -1};
    return T(factors[(std::size_t(rank) * 3 + i) % 7]);
  } else if constexpr (std::is_integral_v<T>) {
    return T(mix(rank, i));
  } else {
    return T(int(mix(rank, i) % 2001) - 1000) / T(4);
  }
}

template <class T, class Op>
std::vector<T> inputs(int rank, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = input_value<T, Op>(rank, i);
  return v;
}

// Every rank's input for one grid point, made once and shared by all the algorithms
// and forms checked there.
template <class T, class Op>
std::vector<std::vector<T>> all_inputs(int p, std::size_t count) {
  std::vector<std::vector<T>> given;
  for (int r = 0; r < p; ++r) given.push_back(inputs<T, Op>(r, count));
  return given;
}

// Element i reduced over ranks 0..P-1 in rank order, then finalized: the serial
// reference every algorithm must match.
template <class T, class Op>
std::vector<T> reduced(const std::vector<std::vector<T>>& given) {
  Op op{};
  std::vector<T> acc = given[0];
  for (std::size_t r = 1; r < given.size(); ++r)
    for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = op(acc[i], given[r][i]);
  if constexpr (coll::has_finalize<Op, T>)
    for (auto& x : acc) x = op.finalize(x, int(given.size()));
  return acc;
}

// ---- checking ------------------------------------------------------------------

// Empty if `got` is bitwise equal to `want`, else where they first differ. Compared as
// bytes, so that the grids compile it once, not for each element type.
inline std::string mismatch_of_bytes(std::span<const std::byte> got, std::span<const std::byte> want,
                                     std::size_t element_size, const std::string& what) {
  if (got.size() != want.size())
    return what + ": size " + std::to_string(got.size() / element_size) + " != " + std::to_string(want.size() / element_size);
  if (got.empty() || std::memcmp(got.data(), want.data(), got.size()) == 0) return {};
  for (std::size_t at = 0; at < got.size(); at += element_size)
    if (std::memcmp(got.data() + at, want.data() + at, element_size) != 0)
      return what + ": first difference at element " + std::to_string(at / element_size);
  return {};
}
template <class T>
std::string mismatch(std::span<const T> got, std::span<const T> want, const std::string& what) {
  return mismatch_of_bytes(std::as_bytes(got), std::as_bytes(want), sizeof(T), what);
}

// ---- grids ---------------------------------------------------------------------

template <class... A>
struct type_list {};

using algorithms = type_list<coll::ring, coll::double_binary_tree, coll::direct, coll::halving_doubling, coll::hierarchical<>,
                             coll::automatic>;
using element_types = type_list<std::int32_t, std::int64_t, float, double>;

// Calls f.operator()<A>() for every algorithm A that implements the collective Kind.
template <class Kind, class F, class... A>
void each_algorithm_of(F&& f, type_list<A...>) {
  (..., [&] {
    if constexpr (coll::implements<A, Kind>) f.template operator()<A>();
  }());
}
template <class Kind, class F>
void each_algorithm(F&& f) {
  each_algorithm_of<Kind>(f, algorithms{});
}

template <class F, class... T>
void each_type_of(F&& f, type_list<T...>) {
  (..., f.template operator()<T>());
}
template <class F>
void each_type(F&& f) {
  each_type_of(f, element_types{});
}

// One built-in op for each element type: a sum, a maximum, a mean (which finishes after
// combining) and a product.
template <class T>
using representative_op = std::conditional_t<
    std::is_same_v<T, std::int64_t>, coll::max,
    std::conditional_t<std::is_same_v<T, float>, coll::avg, std::conditional_t<std::is_same_v<T, double>, coll::prod, coll::sum>>>;

template <class Op>
inline constexpr bool is_builtin_op = std::is_same_v<Op, coll::sum> || std::is_same_v<Op, coll::prod> ||
                                      std::is_same_v<Op, coll::min> || std::is_same_v<Op, coll::max> ||
                                      std::is_same_v<Op, coll::avg> || std::is_same_v<Op, coll::bit_and> ||
                                      std::is_same_v<Op, coll::bit_or> || std::is_same_v<Op, coll::bit_xor>;

// The large case runs with the user's ops and one built-in op per element type: what it
// crosses are sizes in bytes, which every op crosses alike, and each op's loop runs
// at every other count (1000 elements: whole vectors and a remainder).
template <class T, class Op>
inline constexpr bool runs_large_case = !is_builtin_op<Op> || std::is_same_v<Op, representative_op<T>>;

// GRID_OPS=one_per_type: only the representative op of each element type. The process
// runs and the runs over faulty<inproc> set it (tests/CMakeLists.txt): a transport
// moves bytes and never sees the op,
// and every op runs on the same combining code whichever transport carried its
// operands, which the threads' runs check for each op.
inline bool every_builtin_op_runs() {
  static const bool every = [] {
    const char* ops = std::getenv("GRID_OPS");
    return ops == nullptr || std::string_view(ops) != "one_per_type";
  }();
  return every;
}

// Every built-in op that applies to T (or, under GRID_OPS=one_per_type, its
// representative op).
template <class T, class F>
void each_builtin_op(F&& f) {
  if (!every_builtin_op_runs()) {
    f.template operator()<representative_op<T>>();
    return;
  }
  f.template operator()<coll::sum>();
  f.template operator()<coll::prod>();
  f.template operator()<coll::min>();
  f.template operator()<coll::max>();
  f.template operator()<coll::avg>();
  if constexpr (std::is_integral_v<T>) {
    f.template operator()<coll::bit_and>();
    f.template operator()<coll::bit_or>();
    f.template operator()<coll::bit_xor>();
  }
}

// The algorithms a grid runs (T, Op) through: every one for the user's ops and for T's
// representative op, automatic alone for the other built-in ops. An op reaches a call
// only through its element work (its combining loop, the same whatever the algorithm);
// an algorithm sees of it only whether it commutes and whether it finishes (avg),
// which the representative ops cover.
template <class Kind, class T, class Op, class F>
void each_algorithm_for(F&& f) {
  if constexpr (is_builtin_op<Op> && !std::is_same_v<Op, representative_op<T>>)
    f.template operator()<coll::automatic>();
  else
    each_algorithm<Kind>(f);
}

inline std::string describe_point(std::string_view algorithm, const char* type, const char* op, int p, std::size_t n,
                                  bool in_place) {
  return std::string(algorithm) + " " + type + " " + op + " P=" + std::to_string(p) + " N=" + std::to_string(n) +
         (in_place ? " in-place" : " out-of-place");
}
template <class A, class T, class Op>
std::string describe(int p, std::size_t n, bool in_place) {
  return describe_point(A::name, typeid(T).name(), typeid(Op).name(), p, n, in_place);
}

// Uneven per-rank counts for the v-forms: some ranks give nothing.
inline std::vector<std::size_t> uneven_counts(int p, std::size_t n) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) counts[std::size_t(r)] = r % 3 == 1 ? 0 : n + std::size_t(r);
  return counts;
}

}  // namespace testing
