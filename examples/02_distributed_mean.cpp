// 02: the mean of a dataset sharded unevenly over the ranks.
//
// Averaging the ranks' local means would be wrong: a rank holding 50 samples would
// weigh as much as one holding 350. What does add up across ranks is each shard's sum
// and its count, so the ranks all-reduce those two numbers and divide once at the
// end. Both travel in one buffer, so the call pays the latency once, not twice.
//
// When every rank holds the same number of values, collectives::avg does it all: it
// sums like collectives::sum, and each finished element is divided by the rank count
// once, at the end.
//
// usage: 02_distributed_mean [ranks = 4]                 ranks as threads
//        collectives-run -n 4 02_distributed_mean        ranks as processes
// (see ranks.hpp: the same code runs either way)

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

// Rank r holds samples [offset(r), offset(r) + size(r)) of the dataset; shards grow
// with the rank so that their sizes really differ.
std::size_t shard_size(int rank) { return 50 + 100 * std::size_t(rank); }
std::size_t shard_offset(int rank) {
  std::size_t offset = 0;
  for (int q = 0; q < rank; ++q) offset += shard_size(q);
  return offset;
}

// Sample g of the dataset; it drifts upwards, so later (larger) shards have larger means.
double sample(std::size_t g) { return 20.0 + 0.01 * double(g) + double(g * 37 % 11); }

// Rank r's gradient: small integers stored as floats, so sums are exact in any order.
float gradient_value(int rank, std::size_t i) { return float(int(i) * (rank + 1) - rank); }

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  if (!command.well_formed(0)) return command.usage("");

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank();

    // The serial answers, from the whole dataset in one place.
    const std::size_t total = shard_offset(ranks);
    double serial_sum = 0;
    for (std::size_t g = 0; g < total; ++g) serial_sum += sample(g);
    const double serial_mean = serial_sum / double(total);

    constexpr std::size_t parameters = 8;
    std::array<float, parameters> serial_gradient{};
    for (std::size_t i = 0; i < parameters; ++i) {
      float sum = 0;
      for (int q = 0; q < ranks; ++q) sum += gradient_value(q, i);
      serial_gradient[i] = sum / float(ranks);
    }

    std::vector<double> shard(shard_size(r));
    for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = sample(shard_offset(r) + i);

    // The global mean: sum and count, reduced together. (A count kept in a double is
    // exact up to 2^53 samples.)
    const double local_sum = std::accumulate(shard.begin(), shard.end(), 0.0);
    std::array<double, 2> sum_and_count{local_sum, double(shard.size())};
    coll::all_reduce(comm, sum_and_count, coll::sum{});
    const double global_mean = sum_and_count[0] / sum_and_count[1];
    examples::expect(std::abs(global_mean - serial_mean) <= 1e-12 * std::abs(serial_mean), r,
           "global mean is " + std::to_string(global_mean) + ", the serial mean is " + std::to_string(serial_mean));

    // The tempting shortcut, for contrast: avg of one value per rank gives the mean
    // of the local means, which is the global mean only if all shards are equal.
    const double local_mean = local_sum / double(shard.size());
    const double mean_of_means = coll::all_reduce(comm, local_mean, coll::avg{});

    // Equal sizes: every rank computed a gradient of the same parameters on its own
    // batch, and the update wants their mean, element by element.
    std::vector<float> gradient(parameters);
    for (std::size_t i = 0; i < parameters; ++i) gradient[i] = gradient_value(r, i);
    coll::all_reduce(comm, gradient, coll::avg{});
    // Exact sums, divided once by the rank count on both sides: equal to the bit.
    for (std::size_t i = 0; i < parameters; ++i)
      examples::expect(gradient[i] == serial_gradient[i], r,
             "avg gradient[" + std::to_string(i) + "] is " + std::to_string(gradient[i]) + ", the serial mean is " +
                 std::to_string(serial_gradient[i]));
    if (!examples::prints_summary(comm)) return;

    std::cout << "dataset of " << total << " samples in " << ranks << (ranks == 1 ? " shard of" : " shards of");
    for (int q = 0; q < ranks; ++q) std::cout << ' ' << shard_size(q);
    std::cout << "\n  global mean, from all_reduce of (sum, count): " << global_mean << " (serial: " << serial_mean
              << ")\n"
              << "  mean of the local means, for contrast:         " << mean_of_means
              << (ranks > 1 ? " (wrong: small shards weigh too much)\n" : "\n") << "  avg of " << ranks
              << (ranks == 1 ? " gradient:" : " equal-size gradients:");
    for (float g : gradient) std::cout << ' ' << g;
    std::cout << "\n  all results match the serial computation on every rank\n";
  });
}
