// Floating-point sums of arbitrary values depend on the order of the additions.
// Each algorithm documents its order; here its results must equal, to the last bit,
// a serial computation in that order, be identical on every rank, and repeat exactly.
// The same for bf16, whose sum rounds at each add (element_types.hpp).
// Sums through an accumulator (ops/accumulate.hpp) round once, and reproducible_sum
// gives the same bits whatever the algorithm, rank count and split of the values.
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include <collectives/element_types.hpp>
#include <collectives/fixed_point.hpp>
#include <collectives/ops/accumulate.hpp>

#include "harness.hpp"
#include "sums.hpp"

using namespace testing;

namespace {

// direct: the owner of chunk c starts from its own part, folds in the lower ranks
// right to left, then the higher ranks left to right.
template <class T>
std::vector<T> direct_order(const std::vector<std::vector<T>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<T> out(n);
  for (int c = 0; c < p; ++c) {
    const auto [offset, count] = coll::plan::even_chunk(n, p, c);
    for (std::size_t i = offset; i < offset + count; ++i) {
      T acc = x[std::size_t(c)][i];
      for (int q = c - 1; q >= 0; --q) acc = x[std::size_t(q)][i] + acc;
      for (int q = c + 1; q < p; ++q) acc = acc + x[std::size_t(q)][i];
      out[i] = acc;
    }
  }
  return out;
}

// ring: chunk c starts at rank c+1 and travels right; each rank adds its part to
// what arrives: acc = x[c+k] + acc.
template <class T>
std::vector<T> ring_order(const std::vector<std::vector<T>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<T> out(n);
  for (int c = 0; c < p; ++c) {
    const auto [offset, count] = coll::plan::even_chunk(n, p, c);
    for (std::size_t i = offset; i < offset + count; ++i) {
      T acc = x[std::size_t((c + 1) % p)][i];
      for (int k = 2; k <= p; ++k) acc = x[std::size_t((c + k) % p)][i] + acc;
      out[i] = acc;
    }
  }
  return out;
}

// double binary tree: a node's value is (left subtree + own part) + right subtree;
// the first half of the buffer goes up tree 0, the second half tree 1.
template <class T>
T subtree(const std::vector<coll::tree_links>& links, int node, const std::vector<std::vector<T>>& x, std::size_t i) {
  const auto& me = links[std::size_t(node)];
  T acc = x[std::size_t(node)][i];
  if (me.left >= 0) acc = subtree(links, me.left, x, i) + acc;
  if (me.right >= 0) acc = acc + subtree(links, me.right, x, i);
  return acc;
}
template <class T>
std::vector<T> tree_order(const std::vector<std::vector<T>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<T> out(n);
  for (int half = 0; half < 2; ++half) {
    const auto links = coll::double_binary_tree::links(p, half);
    const int root = coll::double_binary_tree::root_of(p, half);
    const auto [offset, count] = coll::plan::even_chunk(n, 2, half);
    for (std::size_t i = offset; i < offset + count; ++i) out[i] = subtree(links, root, x, i);
  }
  return out;
}

template <class A, class T = float>
void check_order(std::vector<T> (*serial)(const std::vector<std::vector<T>>&, std::size_t)) {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p)) {
      const auto info = case_info(std::string(A::name) + " P=" + std::to_string(p) + " N=" + std::to_string(n));
      const auto given = random_inputs<T>(p, n, unsigned(p * 7919 + n));
      const auto want = serial(given, n);
      std::vector<std::vector<T>> first(static_cast<std::size_t>(p));
      for (int run = 0; run < 2; ++run)
        on_ranks(p, [&](comm& c) {
          auto data = given[std::size_t(c.rank())];
          coll::all_reduce<A>(c, data, coll::sum{});
          if (run == 0) first[std::size_t(c.rank())] = data;
          else if (auto m = mismatch<T>(data, first[std::size_t(c.rank())], "second run"); !m.empty()) return m;
          return mismatch<T>(data, want, "result in the documented order");
        });
    }
}

}  // namespace

TEST_CASE("float all_reduce: direct adds in its documented order, bitwise") { check_order<coll::direct>(direct_order<float>); }
TEST_CASE("float all_reduce: ring adds in its documented order, bitwise") { check_order<coll::ring>(ring_order<float>); }
TEST_CASE("float all_reduce: double binary tree adds in its documented order, bitwise") {
  check_order<coll::double_binary_tree>(tree_order<float>);
}
TEST_CASE("bf16 all_reduce: each algorithm adds in its documented order, rounding at each add, bitwise") {
  check_order<coll::direct, coll::bf16>(direct_order<coll::bf16>);
  check_order<coll::ring, coll::bf16>(ring_order<coll::bf16>);
  check_order<coll::double_binary_tree, coll::bf16>(tree_order<coll::bf16>);
}

TEST_CASE("float all_reduce: automatic gives bitwise the same result on every rank, run after run") {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p)) {
      INFO("P=", p, " N=", n);
      const auto given = random_inputs(p, n, 17);
      on_ranks(p, [&](comm& c) {
        std::vector<float> runs[2];
        for (auto& result : runs) {
          result = given[std::size_t(c.rank())];
          coll::all_reduce(c, result, coll::sum{});
        }
        if (auto m = mismatch<float>(runs[1], runs[0], "second run"); !m.empty()) return m;
        auto rank0 = runs[0];
        coll::broadcast<coll::direct>(c, rank0, 0);
        return mismatch<float>(runs[0], rank0, "rank 0's result");
      });
    }
}

// ---- sums through an accumulator ------------------------------------------------

namespace {

using narrow_types = std::tuple<coll::bf16, coll::fp16, coll::fp8_e4m3, coll::fp8_e5m2>;

template <class A, class T>
void check_rounded_once(int p, std::size_t n) {
  const auto given = unit_inputs<T>(p, n, unsigned(p * 31 + n));
  const auto want = rounded_once(given, n);
  const auto wide = coll::accumulate_as<float>(coll::sum{});
  const auto info = case_info(std::string(A::name) + " " + typeid(T).name() + " P=" + std::to_string(p) + " N=" + std::to_string(n));
  on_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    auto data = given[r];
    coll::all_reduce<A>(c, data, wide);  // in place
    if (auto m = mismatch<T>(data, want, "all_reduce"); !m.empty()) return m;
    std::vector<T> out(n);
    coll::all_reduce<A>(c, given[r], out, wide);
    if (auto m = mismatch<T>(out, want, "all_reduce out of place"); !m.empty()) return m;
    if constexpr (coll::implements<A, coll::kind::reduce>) {
      const int root = c.size() - 1;
      std::vector<T> at_root(c.rank() == root ? n : 0);
      coll::reduce<A>(c, given[r], at_root, wide, root);
      if (c.rank() == root)
        if (auto m = mismatch<T>(at_root, want, "reduce"); !m.empty()) return m;
    }
    if constexpr (coll::implements<A, coll::kind::reduce_scatterv>) {
      const auto counts = coll::plan::even_chunk_counts(n, c.size());
      const std::size_t own = coll::plan::displacements(counts)[r];
      std::vector<T> part(counts[r]);
      coll::reduce_scatterv<A>(c, given[r], part, counts, wide);
      if (auto m = mismatch<T>(part, std::span(want).subspan(own, counts[r]), "reduce_scatterv"); !m.empty()) return m;
    }
    return std::string();
  });
}

template <class A>
void check_rounded_once_each_type() {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p, false))
      std::apply([&](auto... type) { (check_rounded_once<A, decltype(type)>(p, n), ...); }, narrow_types{});
}

template <class T>
std::vector<std::vector<T>> prefixes(const std::vector<std::vector<T>>& x, std::size_t n) {
  std::vector<std::vector<T>> out;
  for (const auto& v : x) out.emplace_back(v.begin(), v.begin() + std::ptrdiff_t(n));
  return out;
}

template <class A, class T>
void check_reproducible(int p, std::size_t n, std::uint64_t max_terms = coll::reproducible_sum{}.max_terms) {
  // Mixed magnitudes where T holds them; fp16 and fp8 values in [-1, 1].
  constexpr bool small_range = std::is_same_v<T, coll::fp16> || sizeof(T) == 1;
  const auto given = small_range ? unit_inputs<T>(p, n, unsigned(p * 131 + n)) : random_inputs<T>(p, n, unsigned(p * 131 + n));
  const coll::reproducible_sum op{.max_terms = max_terms};
  const auto want = fixed_point_sum(given, n, op.max_terms);
  const auto info = case_info(std::string(A::name) + " " + typeid(T).name() + " P=" + std::to_string(p) + " N=" + std::to_string(n));
  on_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    auto data = given[r];
    coll::all_reduce<A>(c, data, op);
    if (auto m = mismatch<T>(data, want, "all_reduce"); !m.empty()) return m;
    if constexpr (coll::implements<A, coll::kind::reduce>) {
      std::vector<T> at_root(c.rank() == 0 ? n : 0);
      coll::reduce<A>(c, given[r], at_root, op, 0);
      if (c.rank() == 0)
        if (auto m = mismatch<T>(at_root, want, "reduce"); !m.empty()) return m;
    }
    if constexpr (coll::implements<A, coll::kind::reduce_scatterv>) {  // parts across blocks: a part's own scales
      const auto counts = uneven_counts(c.size(), n / std::size_t(2 * c.size()));
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
      if (total <= n) {
        const std::size_t own = coll::plan::displacements(counts)[r];
        std::vector<T> part(counts[r]);
        coll::reduce_scatterv<A>(c, std::span(given[r]).first(total), part, counts, op);
        const auto want_all = fixed_point_sum(prefixes(given, total), total, op.max_terms);
        if (auto m = mismatch<T>(part, std::span(want_all).subspan(own, counts[r]), "reduce_scatterv"); !m.empty()) return m;
      }
    }
    return std::string();
  });
}

template <class A>
void check_reproducible_each_type() {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p, false)) {
      check_reproducible<A, float>(p, n);
      check_reproducible<A, double>(p, n);
      check_reproducible<A, coll::bf16>(p, n);
      check_reproducible<A, coll::fp8_e4m3>(p, n);
    }
}

// check.operator()<A>() for each algorithm.
template <class Check>
void under_every_algorithm(Check check) {
  check.template operator()<coll::direct>();
  check.template operator()<coll::ring>();
  check.template operator()<coll::double_binary_tree>();
  check.template operator()<coll::halving_doubling>();
  check.template operator()<coll::automatic>();
}

}  // namespace

TEST_CASE("accumulate_as<float>: bf16, fp16 and fp8 sums round once, under every algorithm" * doctest::timeout(300)) {
  under_every_algorithm([]<class A>() { check_rounded_once_each_type<A>(); });
}

TEST_CASE("accumulate_as<float>: the large case, and plain bf16, which rounds at each hop, is further off") {
  for (int p : rank_counts) {
    check_rounded_once<coll::automatic, coll::bf16>(p, large_count);
    if (p < 3) continue;
    const auto given = unit_inputs<coll::bf16>(p, 1000, 5);
    const auto want = rounded_once(given, 1000);
    on_ranks(p, [&](comm& c) {
      auto data = given[std::size_t(c.rank())];
      coll::all_reduce<coll::ring>(c, data, coll::sum{});
      std::size_t off = 0;
      for (std::size_t i = 0; i < data.size(); ++i) off += data[i].bits != want[i].bits;
      return off > 0 ? std::string() : "plain bf16 sums all came out rounded once: the check above could not tell them apart";
    });
  }
}

namespace {

// A user's op that is not commutative (nor associative), and so says nothing of it:
// through an accumulator it applies in rank order, ((x0 op x1) op x2) ..., under every
// algorithm, since the owner of an element reduces all ranks' values of it itself.
struct halve_then_add {
  float operator()(float a, float b) const { return a * 0.5f + b; }
};

template <class A, class Op>
void check_rank_order(int p, std::size_t n, Op user_op, float (*fold)(float, float, int)) {
  const auto given = unit_inputs<coll::bf16>(p, n, unsigned(p * 7 + n));
  std::vector<coll::bf16> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    float total = float(given[0][i]);
    for (int q = 1; q < p; ++q) total = fold(total, float(given[std::size_t(q)][i]), q);
    want[i] = coll::bf16(fold(total, 0.0f, -p));  // -p: the end (avg divides)
  }
  const auto op = coll::accumulate_as<float>(user_op);
  const auto info = case_info(std::string(A::name) + " P=" + std::to_string(p) + " N=" + std::to_string(n));
  on_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    auto data = given[r];
    coll::all_reduce<A>(c, data, op);
    if (auto m = mismatch<coll::bf16>(data, want, "all_reduce"); !m.empty()) return m;
    if constexpr (coll::implements<A, coll::kind::reduce>) {
      std::vector<coll::bf16> at_root(c.rank() == 1 % c.size() ? n : 0);
      coll::reduce<A>(c, given[r], at_root, op, 1 % c.size());
      if (!at_root.empty())
        if (auto m = mismatch<coll::bf16>(at_root, want, "reduce"); !m.empty()) return m;
    }
    if constexpr (coll::implements<A, coll::kind::reduce_scatterv>) {
      const auto counts = uneven_counts(c.size(), n / std::size_t(2 * c.size()));
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
      if (total > n) return std::string();
      const std::size_t own = coll::plan::displacements(counts)[r];
      std::vector<coll::bf16> part(counts[r]);
      coll::reduce_scatterv<A>(c, std::span(given[r]).first(total), part, counts, op);
      if (auto m = mismatch<coll::bf16>(part, std::span(want).subspan(own, counts[r]), "reduce_scatterv"); !m.empty())
        return m;
    }
    return std::string();
  });
}

}  // namespace

TEST_CASE("accumulate_as<float>: a user's op that is not commutative, and avg, apply in rank order under every algorithm") {
  under_every_algorithm([]<class A>() {
    for (int p : rank_counts)
      for (std::size_t n : {std::size_t(0), std::size_t(7), std::size_t(1000)}) {
        check_rank_order<A>(p, n, halve_then_add{}, [](float a, float b, int q) { return q < 0 ? a : a * 0.5f + b; });
        check_rank_order<A>(p, n, coll::avg{}, [](float a, float b, int q) { return q < 0 ? a / float(-q) : a + b; });
      }
  });
}

TEST_CASE("reproducible_sum: the fixed-point sum of the same values, bit for bit, under every algorithm" * doctest::timeout(300)) {
  under_every_algorithm([]<class A>() { check_reproducible_each_type<A>(); });
  for (int p : rank_counts) {
    check_reproducible<coll::automatic, coll::fp16>(p, 1000);
    check_reproducible<coll::automatic, coll::fp8_e5m2>(p, 1000);
    check_reproducible<coll::ring, float>(p, 1000, 8);  // few terms: the loops that convert value by value
    check_reproducible<coll::ring, double>(p, 1000, 1000);
  }
  // Doubles near the bottom of their range: blocks held at the finest scale, 2^-1022.
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) {
      auto given = random_inputs<double>(c.size(), 600, 3);
      for (auto& v : given)
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], -980 - int(i % 90));  // 2^-1060 to 2^-970
      const auto want = fixed_point_sum(given, 600, coll::reproducible_sum{}.max_terms);
      auto data = given[std::size_t(c.rank())];
      coll::all_reduce(c, data, coll::reproducible_sum{});
      return mismatch<double>(data, want, "tiny doubles");
    });
}

TEST_CASE("reproducible_sum: terms split unevenly over the ranks and added locally first give the same bits at every rank count") {
  // 24 terms per element, the same multiset at every P; rank r adds terms
  // [bounds[r], bounds[r + 1]) itself, some ranks none.
  constexpr std::size_t terms = 24, n = 333;
  const auto all = random_inputs<float>(int(terms), n, 99);
  const auto want = fixed_point_sum(all, n, terms, n);  // one scale for all, as agree_fixed_point gives
  for (int p : rank_counts) {
    std::vector<std::size_t> bounds{0};
    for (int r = 0; r < p; ++r) bounds.push_back(r == p - 1 ? terms : std::min(terms, bounds.back() + (r % 3 == 1 ? 0 : std::size_t(r) + 2)));
    INFO("P=", p);
    on_ranks(p, [&](comm& c) {
      const auto r = std::size_t(c.rank());
      int largest = std::numeric_limits<int>::min();
      for (std::size_t t = bounds[r]; t < bounds[r + 1]; ++t) largest = std::max(largest, coll::largest_exponent<float>(all[t]));
      const auto scale = coll::agree_fixed_point(c, largest, terms);
      std::vector<std::int64_t> sums(n);
      for (std::size_t t = bounds[r]; t < bounds[r + 1]; ++t) scale.accumulate(sums, all[t]);
      coll::all_reduce(c, sums, coll::sum{});
      std::vector<float> got(n);
      for (std::size_t i = 0; i < n; ++i) got[i] = scale.value_of<float>(sums[i]);
      return mismatch<float>(got, want, "the sum of 24 terms");
    });
  }
}

TEST_CASE("reproducible_sum: infinity or NaN on one rank is an error on every rank, naming it, and loses no input") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) {
      std::vector<float> data(1000, 1.0f);
      if (c.rank() == c.size() - 1) data[3] = std::numeric_limits<float>::quiet_NaN();
      if (c.rank() == 0 && c.size() > 2) data[5] = std::numeric_limits<float>::infinity();
      const auto given = data;
      const std::string want = "rank(s) " + std::string(c.size() > 2 ? "0, " : "") + std::to_string(c.size() - 1) +
                               " hold infinity or NaN";
      const auto refused = [&](const char* what, auto call) {
        try {
          call();
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::not_finite || std::string(e.what()).find(want) == std::string::npos)
            return std::string(what) + " threw " + e.what();
          if (std::memcmp(data.data(), given.data(), data.size() * sizeof(float)) != 0)
            return std::string(what) + " changed its input";
          return std::string();
        }
        return std::string(what) + ": no error";
      };
      std::vector<float> out(data.size());
      const auto counts = uneven_counts(c.size(), 1000 / std::size_t(2 * c.size()));
      std::vector<float> part(counts[std::size_t(c.rank())]);
      const std::span all = std::span(data).first(std::accumulate(counts.begin(), counts.end(), std::size_t(0)));
      std::string m = refused("all_reduce in place", [&] { coll::all_reduce(c, data, coll::reproducible_sum{}); });
      if (m.empty()) m = refused("all_reduce", [&] { coll::all_reduce(c, data, out, coll::reproducible_sum{}); });
      if (m.empty()) m = refused("reduce", [&] { coll::reduce(c, data, out, coll::reproducible_sum{}, 0); });
      if (m.empty()) m = refused("reduce_scatterv", [&] { coll::reduce_scatterv(c, all, part, counts, coll::reproducible_sum{}); });
      const std::span even = std::span(data).first(data.size() / std::size_t(c.size()) * std::size_t(c.size()));
      if (m.empty()) m = refused("reduce_scatter in place", [&] { coll::reduce_scatter(c, even, coll::reproducible_sum{}); });
      return m;
    });
}
