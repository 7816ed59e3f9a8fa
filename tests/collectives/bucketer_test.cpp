// gradient_bucketer against a plain all_reduce of each gradient, bit for bit: gradients
// of many sizes (empty ones, one larger than a bucket), marked ready in different
// orders on different ranks, over several steps, with sum, avg and a user op.
#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include <collectives/gradient_bucketer.hpp>

#include "harness.hpp"

using namespace testing;

namespace {

// The sizes of a small model's gradients, in registration order.
const std::vector<std::size_t> sizes{1000, 0, 7, 40'003, 1, 333, 0, 2048, 5000, 64};

// Step `step`'s gradient `i` on rank `r`: exact under any order of combining.
template <class T, class Op>
std::vector<T> gradient(int r, int step, std::size_t i, std::size_t n) {
  return inputs<T, Op>(r + 100 * step + 10'000 * int(i), n);
}

// Rank r marks its gradients ready in an order of its own: reversed, or shuffled.
std::vector<std::size_t> readiness_order(int r, int step) {
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if ((r + step) % 2 == 0) std::reverse(order.begin(), order.end());
  else std::shuffle(order.begin(), order.end(), std::mt19937(unsigned(r * 31 + step)));
  return order;
}

template <class T, class Op>
std::string bucketed_equals_per_gradient(comm& c, std::size_t bucket_bytes) {
  std::vector<std::vector<T>> grads(sizes.size()), plain(sizes.size());
  std::vector<std::span<T>> spans;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    grads[i].resize(sizes[i]);
    spans.emplace_back(grads[i]);
  }
  coll::gradient_bucketer<comm::transport_type, T, Op> bucketer(c, spans, Op{}, bucket_bytes);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {  // into the registered memory, which must not move
      plain[i] = gradient<T, Op>(c.rank(), step, i, sizes[i]);
      std::copy(plain[i].begin(), plain[i].end(), grads[i].begin());
    }
    for (std::size_t i : readiness_order(c.rank(), step)) bucketer.ready(i);
    bucketer.finish();
    for (auto& g : plain) coll::all_reduce(c, g, Op{});  // the reference: one gradient at a time
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (auto m = mismatch<T>(grads[i], plain[i], "step " + std::to_string(step) + ", gradient " + std::to_string(i)); !m.empty())
        return m + " (" + std::to_string(bucketer.bucket_count()) + " buckets)";
  }
  return "";
}

}  // namespace

TEST_CASE("the bucketer gives every gradient what a plain all_reduce of it gives, bit for bit") {
  for (int p : rank_counts)
    for (std::size_t bucket_bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{64} << 10, std::size_t{25} << 20}) {
      INFO("P=", p, " bucket bytes ", bucket_bytes);
      on_ranks(p, [&](comm& c) { return bucketed_equals_per_gradient<float, coll::sum>(c, bucket_bytes); });
      on_ranks(p, [&](comm& c) { return bucketed_equals_per_gradient<double, coll::avg>(c, bucket_bytes); });
      on_ranks(p, [&](comm& c) { return bucketed_equals_per_gradient<scored, arg_max>(c, bucket_bytes); });
      on_ranks(p, [&](comm& c) { return bucketed_equals_per_gradient<std::int64_t, coll::bit_xor>(c, bucket_bytes); });
    }
}

TEST_CASE("the bucketer refuses a gradient it does not know and one marked twice") {
  on_ranks(rank_counts.front(), [&](comm& c) -> std::string {
    std::vector<float> a(10), b(10);
    coll::gradient_bucketer<comm::transport_type, float> bucketer(c, {std::span(a), std::span(b)});
    try {
      bucketer.ready(2);
      return "an unknown gradient was taken";
    } catch (const std::out_of_range&) {
    }
    bucketer.ready(0);
    try {
      bucketer.ready(0);
      return "a gradient marked twice was taken";
    } catch (const std::logic_error&) {
    }
    bucketer.finish();
    return "";
  });
}
