// 11: a training loop that loses a rank and goes on without it.
//
// The ranks fit a linear model to a fixed data set by gradient descent: each rank
// sums the gradient over its shard (every size-th sample), an all_reduce adds the
// shards up, and every rank takes the same step. Halfway through, one rank dies (it
// kills itself with SIGKILL, as a crash or an out-of-memory kill would). The others
// see the loss as an error from the all_reduce. Instead of exiting, they:
//   1. shrink: comm.shrink() revokes the old communicator and returns a new one of the
//      ranks that live, numbered 0, 1, ... in their old order; every survivor gets the
//      same group, even if another rank dies meanwhile;
//   2. agree on where to resume: the all_reduce that failed may have finished on some
//      ranks and not on others, so each keeps the model before its last step too, and
//      all go back to the last step every one of them finished;
//   3. re-shard: the same data set over the smaller group, so no sample is lost;
// and train on. The model at the end must equal a serial computation of the same
// steps over the whole data set, whichever rank died and whenever.
//
// Ranks must be processes (a thread cannot die alone), and the launcher must let the
// others go on when one is killed:
//
//   collectives-run -n 4 --keep-going build/examples/11_survive_a_lost_rank [steps = 40] [lost rank] [step]
//
// The lost rank is the last one unless given; it dies at step `steps / 2` unless given.

#include <signal.h>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t samples = 6000, features = 16;
constexpr float learning_rate = 0.2f;

// Sample i's features and target, the same on every rank (no file to read).
float feature(std::size_t i, std::size_t f) { return std::sin(float(i * features + f) * 0.37f); }
float target(std::size_t i) {
  float y = 0.25f;
  for (std::size_t f = 0; f < features; ++f) y += feature(i, f) * float(f % 5) * 0.1f;
  return y + 0.01f * std::cos(float(i));
}

using weights = std::array<float, features + 1>;  // the last one is the bias

// The gradient of the squared error summed over samples first, first + stride, ...
weights gradient_sum(const weights& w, std::size_t first, std::size_t stride) {
  weights g{};
  for (std::size_t i = first; i < samples; i += stride) {
    float error = w[features] - target(i);
    for (std::size_t f = 0; f < features; ++f) error += w[f] * feature(i, f);
    for (std::size_t f = 0; f < features; ++f) g[f] += error * feature(i, f);
    g[features] += error;
  }
  return g;
}

void step(weights& w, const weights& g) {
  for (std::size_t f = 0; f <= features; ++f) w[f] -= learning_rate * g[f] / float(samples);
}

float loss(const weights& w) {
  float sum = 0;
  for (std::size_t i = 0; i < samples; ++i) {
    float error = w[features] - target(i);
    for (std::size_t f = 0; f < features; ++f) error += w[f] * feature(i, f);
    sum += error * error;
  }
  return sum / float(samples);
}

}  // namespace

int main(int argc, char** argv) {
  if (!coll::bootstrap::rank_variables_set()) {
    std::cerr << "11_survive_a_lost_rank runs its ranks as processes, one of which dies:\n"
                 "  collectives-run -n 4 --keep-going "
              << argv[0] << " [steps = 40] [lost rank] [step]\n";
    return 2;
  }
  using communicator = coll::communicator<coll::automatic_transport>;
  std::optional<communicator> comm(communicator::from_env());
  const int first_size = comm->size(), first_rank = comm->rank();
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  const int lost = argc > 2 ? std::atoi(argv[2]) : first_size - 1;
  const int dies_at = argc > 3 ? std::atoi(argv[3]) : steps / 2;
  if (!std::getenv("COLLECTIVES_TIMEOUT")) comm->set_timeout(std::chrono::seconds(5));

  weights w{}, before{};  // the model, and the model before the last step
  int done = 0;           // steps this rank has finished
  while (done < steps) {
    try {
      if (first_rank == lost && done == dies_at && first_size > 1) ::raise(SIGKILL);
      weights g = gradient_sum(w, std::size_t(comm->rank()), std::size_t(comm->size()));
      coll::all_reduce(*comm, std::span<float>(g), coll::sum{});
      before = w;
      step(w, g);
      ++done;
    } catch (const coll::error& e) {
      const int old_size = comm->size();
      std::vector<int> left;
      for (;;) {  // until a group answers: another rank may die meanwhile
        // 1. The survivors' group.
        comm.emplace(comm->shrink());
        // 2. Back to the last step all finished: at most one behind this rank's. And
        //    which ranks are left, by their first numbers, for the report.
        int resume = done;
        try {
          coll::all_reduce(*comm, std::span<int>(&resume, 1), coll::min{});
          left.resize(std::size_t(comm->size()));
          coll::all_gather(*comm, std::span<const int>(&first_rank, 1), std::span<int>(left));
        } catch (const coll::error&) {
          continue;
        }
        if (resume < done) w = before;
        done = resume;
        break;
      }
      // 3. The next steps shard the data over comm->size() ranks.
      if (comm->rank() == 0) {
        std::cout << "at step " << done << " (" << e.what() << ") went on with " << comm->size() << " of " << old_size
                  << " ranks; lost:";
        for (int r = 0; r < first_size; ++r)
          if (std::find(left.begin(), left.end(), r) == left.end()) std::cout << " rank " << r;
        std::cout << "\n";
      }
    }
  }

  weights serial{};
  for (int s = 0; s < steps; ++s) step(serial, gradient_sum(serial, 0, 1));
  float worst = 0;
  for (std::size_t f = 0; f <= features; ++f) worst = std::max(worst, std::abs(w[f] - serial[f]));
  const int expected_size = lost >= 0 && lost < first_size && dies_at < steps && first_size > 1 ? first_size - 1 : first_size;
  const bool right = worst <= 1e-4f && comm->size() == expected_size;
  if (comm->rank() == 0)
    std::cout << steps << " steps on " << comm->size() << " of " << first_size << " ranks: loss " << loss(w)
              << " (from " << loss(weights{}) << "); largest difference from the serial model " << worst
              << (right ? ", within 1e-4" : ", WRONG") << "\n";
  if (comm->size() != expected_size)
    std::cerr << "rank " << first_rank << ": the group has " << comm->size() << " ranks, expected " << expected_size << "\n";
  return right ? 0 : 1;
}
