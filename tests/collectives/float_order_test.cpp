// Floating-point sums of arbitrary values depend on the order of the additions.
// Each algorithm documents its order; here its results must equal, to the last bit,
// a serial computation in that order, be identical on every rank, and repeat exactly.
// The same for bf16, whose sum rounds at each add (element_types.hpp).
#include <random>

#include <collectives/element_types.hpp>

#include "harness.hpp"

using namespace testing;

namespace {

template <class T = float>
std::vector<std::vector<T>> random_inputs(int p, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<std::vector<T>> given(static_cast<std::size_t>(p), std::vector<T>(n));
  for (auto& v : given)
    for (auto& x : v) x = T(dist(gen) * std::pow(10.0f, float(int(gen() % 7) - 3)));  // mixed magnitudes
  return given;
}

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
