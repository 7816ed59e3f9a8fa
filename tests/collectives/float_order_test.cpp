// Floating-point sums of arbitrary values depend on the order of the additions.
// Each algorithm documents its order; here its results must equal, to the last bit,
// a serial computation in that order, be identical on every rank, and repeat exactly.
#include <random>

#include "harness.hpp"

using namespace testing;

namespace {

std::vector<std::vector<float>> random_inputs(int p, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  std::vector<std::vector<float>> given(static_cast<std::size_t>(p), std::vector<float>(n));
  for (auto& v : given)
    for (auto& x : v) x = dist(gen) * std::pow(10.0f, float(int(gen() % 7) - 3));  // mixed magnitudes
  return given;
}

// direct: the owner of chunk c starts from its own part, folds in the lower ranks
// right to left, then the higher ranks left to right.
std::vector<float> direct_order(const std::vector<std::vector<float>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<float> out(n);
  for (int c = 0; c < p; ++c) {
    const auto [offset, count] = coll::plan::even_chunk(n, p, c);
    for (std::size_t i = offset; i < offset + count; ++i) {
      float acc = x[std::size_t(c)][i];
      for (int q = c - 1; q >= 0; --q) acc = x[std::size_t(q)][i] + acc;
      for (int q = c + 1; q < p; ++q) acc = acc + x[std::size_t(q)][i];
      out[i] = acc;
    }
  }
  return out;
}

// ring: chunk c starts at rank c+1 and travels right; each rank adds its part to
// what arrives: acc = x[c+k] + acc.
std::vector<float> ring_order(const std::vector<std::vector<float>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<float> out(n);
  for (int c = 0; c < p; ++c) {
    const auto [offset, count] = coll::plan::even_chunk(n, p, c);
    for (std::size_t i = offset; i < offset + count; ++i) {
      float acc = x[std::size_t((c + 1) % p)][i];
      for (int k = 2; k <= p; ++k) acc = x[std::size_t((c + k) % p)][i] + acc;
      out[i] = acc;
    }
  }
  return out;
}

// double binary tree: a node's value is (left subtree + own part) + right subtree;
// the first half of the buffer goes up tree 0, the second half tree 1.
float subtree(const std::vector<coll::tree_links>& links, int node, const std::vector<std::vector<float>>& x,
              std::size_t i) {
  const auto& me = links[std::size_t(node)];
  float acc = x[std::size_t(node)][i];
  if (me.left >= 0) acc = subtree(links, me.left, x, i) + acc;
  if (me.right >= 0) acc = acc + subtree(links, me.right, x, i);
  return acc;
}
std::vector<float> tree_order(const std::vector<std::vector<float>>& x, std::size_t n) {
  const int p = int(x.size());
  std::vector<float> out(n);
  for (int half = 0; half < 2; ++half) {
    const auto links = coll::double_binary_tree::links(p, half);
    const int root = coll::double_binary_tree::root_of(p, half);
    const auto [offset, count] = coll::plan::even_chunk(n, 2, half);
    for (std::size_t i = offset; i < offset + count; ++i) out[i] = subtree(links, root, x, i);
  }
  return out;
}

template <class A>
void check_order(std::vector<float> (*serial)(const std::vector<std::vector<float>>&, std::size_t)) {
  for (int p : rank_counts)
    for (std::size_t n : element_counts(p)) {
      const auto info = case_info(std::string(A::name) + " P=" + std::to_string(p) + " N=" + std::to_string(n));
      const auto given = random_inputs(p, n, unsigned(p * 7919 + n));
      const auto want = serial(given, n);
      std::vector<std::vector<float>> first(static_cast<std::size_t>(p));
      for (int run = 0; run < 2; ++run)
        on_ranks(p, [&](comm& c) {
          auto data = given[std::size_t(c.rank())];
          coll::all_reduce<A>(c, data, coll::sum{});
          if (run == 0) first[std::size_t(c.rank())] = data;
          else if (auto m = mismatch<float>(data, first[std::size_t(c.rank())], "second run"); !m.empty()) return m;
          return mismatch<float>(data, want, "result in the documented order");
        });
    }
}

}  // namespace

TEST_CASE("float all_reduce: direct adds in its documented order, bitwise") { check_order<coll::direct>(direct_order); }
TEST_CASE("float all_reduce: ring adds in its documented order, bitwise") { check_order<coll::ring>(ring_order); }
TEST_CASE("float all_reduce: double binary tree adds in its documented order, bitwise") {
  check_order<coll::double_binary_tree>(tree_order);
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
