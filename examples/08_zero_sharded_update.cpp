// 08: a ZeRO-style training step: each rank keeps the optimizer state of its own shard
// of the parameters only.
//
// Plain data parallelism keeps every parameter's optimizer state on every rank: for
// Adam, two more copies of the model per rank. ZeRO splits that state over the ranks:
//   1. reduce_scatter the gradients: rank r receives the average of its shard only;
//   2. rank r updates its shard of the parameters, with its shard of Adam's state;
//   3. all_gather the parameters: every rank has the whole model again.
// The bytes moved are those of one all_reduce (which is a reduce_scatter followed by an
// all_gather), and each rank holds 1/P of the optimizer state.
//
// The parameter count is not a multiple of the rank count, so the shards differ in
// size: the v-forms, reduce_scatterv and all_gatherv, take each rank's count. The
// parameters' all_gatherv is started non-blocking; the rank computes its loss figure
// meanwhile.
//
// The example checks the sharded training against a serial Adam on the averaged
// gradients, and prints the optimizer memory per rank both ways.
//
// usage: 08_zero_sharded_update [ranks = 4] [steps = 20]     ranks as threads
//        collectives-run -n 4 08_zero_sharded_update [steps]  ranks as processes

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <cmath>
#include <cstddef>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t parameters = 10'007;

// The target each parameter is pulled towards, and rank r's data at step s, which
// shifts its gradient (so the ranks' gradients differ and their average matters).
float target(std::size_t i) { return std::sin(0.01f * float(i)); }
float data_shift(int r, int s, std::size_t i) { return 0.1f * float((r * 7 + s * 3 + int(i % 13)) % 5 - 2); }

// Rank r's gradient of 0.5 * (p - target - shift)^2.
void gradient(int r, int s, std::span<const float> p, std::span<float> g) {
  for (std::size_t i = 0; i < p.size(); ++i) g[i] = p[i] - target(i) - data_shift(r, s, i);
}

// Adam on a range of parameters, with its state for that range.
struct adam {
  std::vector<float> m, v;
  explicit adam(std::size_t n) : m(n, 0.0f), v(n, 0.0f) {}
  void step(int s, std::span<float> p, std::span<const float> g) {
    constexpr float lr = 0.01f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    const float correction1 = 1.0f - std::pow(beta1, float(s + 1)), correction2 = 1.0f - std::pow(beta2, float(s + 1));
    for (std::size_t i = 0; i < p.size(); ++i) {
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      p[i] -= lr * (m[i] / correction1) / (std::sqrt(v[i] / correction2) + eps);
    }
  }
};

// The shards: rank r owns counts[r] parameters from displacement displ[r].
std::vector<std::size_t> shard_counts(int ranks) {
  std::vector<std::size_t> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(parameters / std::size_t(ranks) + (std::size_t(r) < parameters % std::size_t(ranks)));
  return counts;
}

// The serial reference: the whole model, one Adam, the gradients averaged in rank order.
std::vector<float> train_serially(int ranks, int steps) {
  std::vector<float> p(parameters, 0.0f), g(parameters), sum(parameters);
  adam opt(parameters);
  for (int s = 0; s < steps; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int r = 0; r < ranks; ++r) {
      gradient(r, s, p, g);
      for (std::size_t i = 0; i < parameters; ++i) sum[i] += g[i];
    }
    for (auto& x : sum) x /= float(ranks);
    opt.step(s, p, sum);
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long steps = command.number(0, 20);
  if (!command.well_formed(1) || steps < 1 || steps > 100000) return command.usage("[steps = 20]");

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank();
    const auto counts = shard_counts(ranks);
    std::size_t first = 0;
    for (int q = 0; q < r; ++q) first += counts[std::size_t(q)];
    const std::size_t mine = counts[std::size_t(r)];

    std::vector<float> params(parameters, 0.0f), grads(parameters), shard_grad(mine);
    adam opt(mine);  // this rank's shard of the optimizer state only
    double loss = 0;
    for (int s = 0; s < int(steps); ++s) {
      gradient(r, s, params, grads);
      coll::reduce_scatterv(comm, grads, shard_grad, counts, coll::avg{});    // 1. my shard's average
      const std::span<float> my_params = std::span(params).subspan(first, mine);
      opt.step(s, my_params, shard_grad);                                    // 2. update my shard
      auto gathered = coll::iall_gatherv(comm, params, counts);              // 3. everyone's shards, in place
      loss = 0;  // meanwhile, from the shard this rank has already updated
      for (std::size_t i = 0; i < mine; ++i) loss += 0.5 * double(my_params[i] - target(first + i)) * double(my_params[i] - target(first + i));
      gathered.wait();
    }
    const double total_loss = coll::all_reduce(comm, loss, coll::sum{});

    const auto reference = train_serially(ranks, int(steps));
    float worst = 0;
    for (std::size_t i = 0; i < parameters; ++i) worst = std::max(worst, std::abs(params[i] - reference[i]));
    examples::expect(worst < 1e-4f, r, "the sharded update strays from the serial Adam by " + std::to_string(worst));
    std::vector<float> lowest(parameters), highest(parameters);
    coll::all_reduce(comm, params, lowest, coll::min{});
    coll::all_reduce(comm, params, highest, coll::max{});
    examples::expect(lowest == highest, r, "the ranks' parameters differ");

    if (r == 0)
      std::cout << "ZeRO-style Adam on " << parameters << " parameters over " << ranks << " ranks, " << steps << " steps\n"
                << "  shards of " << counts.front() << " to " << counts.back() << " parameters (reduce_scatterv, all_gatherv)\n"
                << "  optimizer state per rank: " << 2 * mine * sizeof(float) << " bytes, against "
                << 2 * parameters * sizeof(float) << " replicated\n"
                << "  loss " << total_loss << "; matches the serial Adam (max difference " << worst
                << "), every rank the same parameters\n";
  });
}
