// 12: data-parallel training with bf16 gradients that gives the same weights, bit for
// bit, at any rank count and under any algorithm.
//
// Each step's global batch of 12 samples is split over the ranks (12 at one rank, 6 at
// two, 4 at three, 3 at four). Each sample's gradient comes out in bf16, as in a
// mixed-precision step, and the step adds the 12 gradients. Floating-point adds depend
// on their order, and the order depends on the split and on the algorithm, so the
// usual ways give weights that differ with the rank count:
//
//   plain bf16     each rank adds its samples in bf16, then all_reduce with sum: every
//                  add rounds to bf16, locally and at each hop.
//   float accum.   each rank adds its samples in float and rounds once to bf16, then
//                  all_reduce with accumulate_as<float>: each element's owner adds the
//                  ranks' values in float and rounds once. Closer, but not the same bits.
//   reproducible   the ranks agree on a fixed-point scale (agree_fixed_point), each adds
//                  its samples' gradients as int64 multiples of it, and all_reduce adds
//                  the int64s: exact, so in any order the same; the total rounds once.
//
// The example trains the third way under ring, double binary tree, direct and
// automatic, and checks each against one process adding all 12 samples itself: the
// weights must be equal to the bit. It prints how far the other two ways land from it.
//
// usage: 12_reproducible_bf16_training [ranks = 4] [steps = 40]   ranks as threads (1 to 12)
//        collectives-run -n 4 12_reproducible_bf16_training [steps]

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t global_batch = 12;                 // split over 1, 2, 3, 4, 6 or 12 ranks
constexpr std::size_t in = 16, hidden = 32, out = 4;
constexpr std::size_t parameters = hidden * in + hidden + out * hidden + out;
constexpr float learning_rate = 0.1f;

using weights = std::vector<float>;  // w1 (hidden x in), b1, w2 (out x hidden), b2, back to back

weights initial_weights() {
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 0.3f);
  weights w(parameters);
  for (auto& x : w) x = d(gen);
  return w;
}

// Sample i of step s: an input and its target, a smooth function of the input.
void sample(int s, std::size_t i, float* x, float* t) {
  std::mt19937 gen(unsigned(s * 1000 + int(i)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t k = 0; k < in; ++k) x[k] = u(gen);
  for (std::size_t k = 0; k < out; ++k) t[k] = std::sin(2.0f * x[k]) * x[k + 4];
}

// One sample's gradient of the squared error, in float, then rounded to bf16.
std::vector<coll::bf16> gradient(const weights& w, int s, std::size_t i) {
  float x[in], t[out], h[hidden], y[out];
  sample(s, i, x, t);
  const float *w1 = w.data(), *b1 = w1 + hidden * in, *w2 = b1 + hidden, *b2 = w2 + out * hidden;
  for (std::size_t j = 0; j < hidden; ++j) {
    float z = b1[j];
    for (std::size_t k = 0; k < in; ++k) z += w1[j * in + k] * x[k];
    h[j] = std::tanh(z);
  }
  for (std::size_t o = 0; o < out; ++o) {
    float z = b2[o];
    for (std::size_t j = 0; j < hidden; ++j) z += w2[o * hidden + j] * h[j];
    y[o] = z;
  }
  std::vector<float> g(parameters, 0.0f);
  float *g1 = g.data(), *gb1 = g1 + hidden * in, *g2 = gb1 + hidden, *gb2 = g2 + out * hidden;
  for (std::size_t o = 0; o < out; ++o) {
    const float d = y[o] - t[o];
    gb2[o] = d;
    for (std::size_t j = 0; j < hidden; ++j) {
      g2[o * hidden + j] = d * h[j];
      const float dh = d * w2[o * hidden + j] * (1.0f - h[j] * h[j]);
      gb1[j] += dh;
      for (std::size_t k = 0; k < in; ++k) g1[j * in + k] += dh * x[k];
    }
  }
  std::vector<coll::bf16> rounded(parameters);
  for (std::size_t p = 0; p < parameters; ++p) rounded[p] = coll::bf16(g[p]);
  return rounded;
}

void step(weights& w, std::span<const coll::bf16> total) {
  for (std::size_t p = 0; p < parameters; ++p) w[p] -= learning_rate * float(total[p]) / float(global_batch);
}

// This rank's samples of the global batch: [first, last).
struct share {
  std::size_t first, last;
};
share share_of(int rank, int ranks) {
  return {global_batch * std::size_t(rank) / std::size_t(ranks), global_batch * std::size_t(rank + 1) / std::size_t(ranks)};
}

// The gradients' total, the reproducible way: exact fixed-point adds, rounded once.
template <class Algorithm, class Comm>
std::vector<coll::bf16> reproducible_total(Comm& comm, const std::vector<std::vector<coll::bf16>>& mine) {
  int largest = std::numeric_limits<int>::min();
  for (const auto& g : mine) largest = std::max(largest, coll::largest_exponent<coll::bf16>(g));
  const coll::fixed_point scale = coll::agree_fixed_point(comm, largest, global_batch);
  std::vector<std::int64_t> sums(parameters, 0);
  for (const auto& g : mine) scale.accumulate(sums, g);
  coll::all_reduce<Algorithm>(comm, sums, coll::sum{});
  std::vector<coll::bf16> total(parameters);
  for (std::size_t p = 0; p < parameters; ++p) total[p] = scale.value_of<coll::bf16>(sums[p]);
  return total;
}

enum class way { plain, float_accumulator, reproducible };

template <class Algorithm, class Comm>
weights train(Comm& comm, way how, int steps) {
  weights w = initial_weights();
  const auto [first, last] = share_of(comm.rank(), comm.size());
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<coll::bf16>> mine;
    for (std::size_t i = first; i < last; ++i) mine.push_back(gradient(w, s, i));
    std::vector<coll::bf16> total(parameters, coll::bf16(0.0f));
    if (how == way::reproducible) {
      total = reproducible_total<Algorithm>(comm, mine);
    } else if (how == way::plain) {
      for (const auto& g : mine)
        for (std::size_t p = 0; p < parameters; ++p) total[p] = total[p] + g[p];
      coll::all_reduce<Algorithm>(comm, total, coll::sum{});
    } else {
      for (std::size_t p = 0; p < parameters; ++p) {
        float local = 0;
        for (const auto& g : mine) local += float(g[p]);
        total[p] = coll::bf16(local);
      }
      coll::all_reduce<Algorithm>(comm, total, coll::accumulate_as<float>(coll::sum{}));
    }
    step(w, total);
  }
  return w;
}

// The reference: one process adds all 12 samples' gradients exactly, rounds once.
weights train_alone(int steps) {
  weights w = initial_weights();
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<coll::bf16>> all;
    for (std::size_t i = 0; i < global_batch; ++i) all.push_back(gradient(w, s, i));
    int largest = std::numeric_limits<int>::min();
    for (const auto& g : all) largest = std::max(largest, coll::largest_exponent<coll::bf16>(g));
    const auto scale = coll::fixed_point::for_terms(largest, global_batch);
    std::vector<std::int64_t> sums(parameters, 0);
    for (const auto& g : all) scale.accumulate(sums, g);
    std::vector<coll::bf16> total(parameters);
    for (std::size_t p = 0; p < parameters; ++p) total[p] = scale.value_of<coll::bf16>(sums[p]);
    step(w, total);
  }
  return w;
}

std::size_t differing(const weights& a, const weights& b) {
  std::size_t n = 0;
  for (std::size_t p = 0; p < a.size(); ++p) n += a[p] != b[p];
  return n;
}

float largest_difference(const weights& a, const weights& b) {
  float d = 0;
  for (std::size_t p = 0; p < a.size(); ++p) d = std::max(d, std::fabs(a[p] - b[p]));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long steps = command.number(0, 40);
  if (!command.well_formed(1) || steps < 1 || steps > 100000 || (!command.launched && command.threads > 12))
    return command.usage("[steps = 40]");

  return examples::run_example(command, [&](auto& comm) {
    const int r = comm.rank(), s = int(steps);
    const weights alone = train_alone(s);
    const weights ring = train<coll::ring>(comm, way::reproducible, s);
    const weights tree = train<coll::double_binary_tree>(comm, way::reproducible, s);
    const weights direct = train<coll::direct>(comm, way::reproducible, s);
    const weights automatic = train<coll::automatic>(comm, way::reproducible, s);
    examples::expect(ring == alone, r, "reproducible under ring differs from the one-process sum in " +
                                           std::to_string(differing(ring, alone)) + " weights");
    examples::expect(tree == alone, r, "reproducible under the tree differs from the one-process sum");
    examples::expect(direct == alone, r, "reproducible under direct differs from the one-process sum");
    examples::expect(automatic == alone, r, "reproducible under automatic differs from the one-process sum");

    const weights plain_ring = train<coll::ring>(comm, way::plain, s);
    const weights plain_tree = train<coll::double_binary_tree>(comm, way::plain, s);
    const weights wide_ring = train<coll::ring>(comm, way::float_accumulator, s);
    if (r == 0)
      std::cout << "bf16 gradients of " << global_batch << " samples per step, " << comm.size() << " ranks, " << s
                << " steps, " << parameters << " weights\n"
                << "  reproducible sum, under ring, tree, direct and automatic: the same weights, bit for bit, as one\n"
                << "    process adding all " << global_batch << " samples (and so as at any other rank count)\n"
                << "  plain bf16 sum, ring: " << differing(plain_ring, alone) << " weights differ, by up to "
                << largest_difference(plain_ring, alone) << "; tree: " << differing(plain_tree, alone)
                << " differ; ring against tree: " << differing(plain_ring, plain_tree) << "\n"
                << "  float accumulator, ring: " << differing(wide_ring, alone) << " weights differ, by up to "
                << largest_difference(wide_ring, alone) << "\n";
  });
}
