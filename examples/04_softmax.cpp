// 04: softmax over a vector sharded across the ranks.
//
//   softmax(x)_i = exp(x_i) / sum_j exp(x_j)
//
// Each rank computes its own slice of the output, and needs only two numbers from the
// others, one all_reduce each:
//
//   1. m = max over all x (collectives::max). In float, exp(x) overflows to infinity
//      beyond x = 88.7, and logits that large are common; exp(x - m) is at most 1.
//      Subtracting m changes nothing, since exp(-m) cancels between numerator and
//      denominator, but only if every rank subtracts the same m: hence the global max.
//   2. s = sum over all exp(x - m) (collectives::sum).
//   3. y = exp(x - m) / s, on each rank's own slice; no third message.
//
// usage: 04_softmax [ranks = 4]                 ranks as threads
//        collectives-run -n 4 04_softmax        ranks as processes
// (see ranks.hpp: the same code runs either way)

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

// Shards of different sizes over one vector of logits in [-100, 100].
std::size_t shard_size(int rank) { return 200 + 50 * std::size_t(rank); }
std::size_t shard_offset(int rank) {
  std::size_t offset = 0;
  for (int q = 0; q < rank; ++q) offset += shard_size(q);
  return offset;
}
float logit(std::size_t g) { return float(g * 7919 % 2001) / 10.0f - 100.0f; }

// Float results against a double reference: the ranks add in a different order than a
// serial loop, so expect agreement to rounding, not to the bit. Values that underflow
// in float (below about 1e-38) are allowed to come out as zero.
constexpr double tolerance = 1e-5;
bool agrees(double got, double want) { return std::abs(got - want) <= tolerance * std::abs(want) + 1e-37; }

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  if (!command.well_formed(0)) return command.usage("");

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank();

    // The serial reference, in double, over the whole vector.
    const std::size_t n = shard_offset(ranks);
    double serial_max = -std::numeric_limits<double>::infinity(), serial_sum = 0;
    for (std::size_t g = 0; g < n; ++g) serial_max = std::max(serial_max, double(logit(g)));
    for (std::size_t g = 0; g < n; ++g) serial_sum += std::exp(double(logit(g)) - serial_max);
    std::vector<double> serial(n);
    for (std::size_t g = 0; g < n; ++g) serial[g] = std::exp(double(logit(g)) - serial_max) / serial_sum;

    const std::size_t offset = shard_offset(r);
    std::vector<float> x(shard_size(r));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = logit(offset + i);

    // 1. The global max. (An empty shard would offer -infinity, which never wins.)
    float local_max = -std::numeric_limits<float>::infinity();
    for (float v : x) local_max = std::max(local_max, v);
    const float m = coll::all_reduce(comm, local_max, coll::max{});

    // 2. The denominator.
    std::vector<float> y(x.size());
    float local_sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      y[i] = std::exp(x[i] - m);
      local_sum += y[i];
    }
    const float s = coll::all_reduce(comm, local_sum, coll::sum{});

    // 3. Normalize this rank's slice.
    float shard_sum = 0;
    for (float& v : y) {
      v /= s;
      shard_sum += v;
    }

    for (std::size_t i = 0; i < y.size(); ++i)
      examples::expect(agrees(y[i], serial[offset + i]), r,
             "softmax[" + std::to_string(offset + i) + "] is " + std::to_string(y[i]) + ", serially " +
                 std::to_string(serial[offset + i]));
    // The slices are one distribution: together they must sum to 1.
    const float total = coll::all_reduce(comm, shard_sum, coll::sum{});
    examples::expect(agrees(total, 1.0), r, "the probabilities sum to " + std::to_string(total));

    // For the summary, each shard's share of the probability, on rank 0.
    std::vector<float> shard_sums(r == 0 ? std::size_t(ranks) : 0);
    coll::gather(comm, std::span<const float>(&shard_sum, 1), shard_sums, 0);
    if (!examples::prints_summary(comm)) return;

    std::cout << "softmax of " << n << " logits in [-100, 100] over " << ranks << (ranks == 1 ? " rank\n" : " ranks\n")
              << "  global max " << m << " (exp of it in float: " << std::exp(m) << ", hence the subtraction)\n"
              << "  sum of exp(x - max): " << s << '\n'
              << "  each shard's share of the probability:";
    for (float p : shard_sums) std::cout << ' ' << p;
    std::cout << " (total " << total << ")\n"
              << "  matches the serial softmax within a relative " << tolerance << " on every rank\n";
  });
}
