// 07: data-parallel training of a small MLP, with the gradients' all-reduce overlapping
// the backward pass.
//
// Every rank holds the same model and its own shard of each batch. After the backward
// pass the ranks average their gradients, and each takes the same SGD step, so the
// model stays identical everywhere. A blocking all_reduce after the backward pass
// leaves the cores idle while the bytes move. gradient_bucketer does better, as PyTorch's
// DDP does: each layer's gradients are marked ready as soon as the backward pass has
// them (the last layer first), and a bucket's all_reduce starts while the earlier
// layers are still being computed.
//
// The example trains the same model both ways from the same start. It checks both
// against a serial reference: one process that computes every rank's gradients itself
// and averages them. It prints the time per step of each.
//
// usage: 07_data_parallel_training [ranks = 4] [steps = 30]     ranks as threads
//        collectives-run -n 4 07_data_parallel_training [steps]  ranks as processes

#include <collectives/collectives.hpp>
#include <collectives/gradient_bucketer.hpp>

#include "ranks.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t batch = 32;                            // samples per rank per step
constexpr std::size_t widths[] = {64, 192, 192, 8};          // input, two hidden layers, output
constexpr std::size_t layers = std::size(widths) - 1;
constexpr float learning_rate = 0.05f;

struct layer_params {
  std::vector<float> w, b;  // w: out x in, row-major
};
using model = std::vector<layer_params>;

model initial_model() {
  std::mt19937 gen(7);
  model m(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(widths[l])));
    m[l].w.resize(widths[l + 1] * widths[l]);
    for (auto& x : m[l].w) x = d(gen);
    m[l].b.assign(widths[l + 1], 0.0f);
  }
  return m;
}

// Rank r's samples of step s, and their targets: a fixed smooth function of the input.
void make_batch(int r, int s, std::vector<float>& x, std::vector<float>& t) {
  std::mt19937 gen(unsigned(1000 * s + r));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  x.resize(batch * widths[0]);
  t.resize(batch * widths[layers]);
  for (auto& v : x) v = u(gen);
  for (std::size_t i = 0; i < batch; ++i)
    for (std::size_t k = 0; k < widths[layers]; ++k)
      t[i * widths[layers] + k] = std::sin(x[i * widths[0] + k] * 2.0f) * x[i * widths[0] + k + 8];
}

// One rank's forward and backward pass over its batch. `on_layer_done(l)` runs as soon
// as layer l's gradients are final (l = layers-1 first), so they can leave at once.
template <class OnLayerDone>
void backprop(const model& m, const std::vector<float>& x, const std::vector<float>& t, model& grad,
              OnLayerDone&& on_layer_done) {
  std::vector<std::vector<float>> a(layers + 1);  // activations, a[0] = x
  a[0] = x;
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t in = widths[l], out = widths[l + 1];
    a[l + 1].assign(batch * out, 0.0f);
    for (std::size_t i = 0; i < batch; ++i)
      for (std::size_t o = 0; o < out; ++o) {
        float z = m[l].b[o];
        for (std::size_t k = 0; k < in; ++k) z += m[l].w[o * in + k] * a[l][i * in + k];
        a[l + 1][i * out + o] = l + 1 < layers ? std::tanh(z) : z;
      }
  }
  std::vector<float> delta(batch * widths[layers]);  // d(mean loss)/d(output) of the last layer
  for (std::size_t j = 0; j < delta.size(); ++j) delta[j] = (a[layers][j] - t[j]) / float(batch);
  for (std::size_t l = layers; l-- > 0;) {
    const std::size_t in = widths[l], out = widths[l + 1];
    std::fill(grad[l].w.begin(), grad[l].w.end(), 0.0f);
    std::fill(grad[l].b.begin(), grad[l].b.end(), 0.0f);
    for (std::size_t i = 0; i < batch; ++i)
      for (std::size_t o = 0; o < out; ++o) {
        grad[l].b[o] += delta[i * out + o];
        for (std::size_t k = 0; k < in; ++k) grad[l].w[o * in + k] += delta[i * out + o] * a[l][i * in + k];
      }
    on_layer_done(l);
    if (l == 0) break;
    std::vector<float> previous(batch * in, 0.0f);  // through w, then tanh's derivative
    for (std::size_t i = 0; i < batch; ++i)
      for (std::size_t k = 0; k < in; ++k) {
        float s = 0;
        for (std::size_t o = 0; o < out; ++o) s += m[l].w[o * in + k] * delta[i * out + o];
        previous[i * in + k] = s * (1.0f - a[l][i * in + k] * a[l][i * in + k]);
      }
    delta = std::move(previous);
  }
}

void sgd_step(model& m, const model& grad) {
  for (std::size_t l = 0; l < layers; ++l) {
    for (std::size_t j = 0; j < m[l].w.size(); ++j) m[l].w[j] -= learning_rate * grad[l].w[j];
    for (std::size_t j = 0; j < m[l].b.size(); ++j) m[l].b[j] -= learning_rate * grad[l].b[j];
  }
}

// The serial reference: every rank's gradients computed here, averaged in rank order.
model train_serially(int ranks, int steps) {
  model m = initial_model(), sum = m, grad = m;
  std::vector<float> x, t;
  for (int s = 0; s < steps; ++s) {
    for (auto& l : sum) std::fill(l.w.begin(), l.w.end(), 0.0f), std::fill(l.b.begin(), l.b.end(), 0.0f);
    for (int r = 0; r < ranks; ++r) {
      make_batch(r, s, x, t);
      backprop(m, x, t, grad, [](std::size_t) {});
      for (std::size_t l = 0; l < layers; ++l) {
        for (std::size_t j = 0; j < sum[l].w.size(); ++j) sum[l].w[j] += grad[l].w[j];
        for (std::size_t j = 0; j < sum[l].b.size(); ++j) sum[l].b[j] += grad[l].b[j];
      }
    }
    for (auto& l : sum) {
      for (auto& v : l.w) v /= float(ranks);
      for (auto& v : l.b) v /= float(ranks);
    }
    sgd_step(m, sum);
  }
  return m;
}

// The largest difference from the reference, relative to the reference's largest value.
float distance(const model& a, const model& b) {
  float diff = 0, scale = 1e-30f;
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t j = 0; j < a[l].w.size(); ++j) {
      diff = std::max(diff, std::abs(a[l].w[j] - b[l].w[j]));
      scale = std::max(scale, std::abs(b[l].w[j]));
    }
  return diff / scale;
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long steps = command.number(0, 30);
  if (!command.well_formed(1) || steps < 1 || steps > 100000) return command.usage("[steps = 30]");

  return examples::run_example(command, [&](auto& comm) {
    using transport = typename std::remove_reference_t<decltype(comm)>::transport_type;
    const int ranks = comm.size(), r = comm.rank();
    const model reference = train_serially(ranks, int(steps));

    // Trains from the same start with the gradients averaged one way or the other.
    auto train = [&](bool overlap) {
      model m = initial_model(), grad = m;
      std::vector<std::span<float>> gradients;  // the last layer first: the order backprop finishes them
      for (std::size_t l = layers; l-- > 0;) gradients.insert(gradients.end(), {std::span(grad[l].w), std::span(grad[l].b)});
      coll::gradient_bucketer<transport, float, coll::avg> bucketer(comm, gradients, {}, 32 << 10);
      std::vector<float> x, t;
      coll::barrier(comm);
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < int(steps); ++s) {
        make_batch(r, s, x, t);
        if (overlap) {
          backprop(m, x, t, grad, [&](std::size_t l) {
            const std::size_t first = 2 * (layers - 1 - l);  // layer l's w and b in `gradients`
            bucketer.ready(first);
            bucketer.ready(first + 1);
          });
          bucketer.finish();
        } else {
          backprop(m, x, t, grad, [](std::size_t) {});
          for (auto& g : gradients) coll::all_reduce(comm, g, coll::avg{});
        }
        sgd_step(m, grad);
      }
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return std::pair{m, ms / double(steps)};
    };
    const auto [blocking_model, blocking_ms] = train(false);
    const auto [overlapped_model, overlapped_ms] = train(true);

    // The ranks average in another order than the reference does: equal up to rounding.
    examples::expect(distance(blocking_model, reference) < 1e-4f, r, "training with blocking all_reduce strays from the reference");
    examples::expect(distance(overlapped_model, reference) < 1e-4f, r, "training with the bucketer strays from the reference");
    // Every rank must hold the same model, to the bit.
    std::vector<float> first_weights = overlapped_model[0].w, lowest(first_weights.size()), highest(first_weights.size());
    coll::all_reduce(comm, first_weights, lowest, coll::min{});
    coll::all_reduce(comm, first_weights, highest, coll::max{});
    examples::expect(lowest == highest, r, "the ranks' models differ");

    if (r == 0)
      std::cout << "data-parallel MLP " << widths[0] << "-" << widths[1] << "-" << widths[2] << "-" << widths[3] << ", "
                << ranks << " ranks x " << batch << " samples, " << steps << " steps\n"
                << "  blocking all_reduce after the backward pass: " << blocking_ms << " ms/step\n"
                << "  gradient_bucketer, overlapping it:          " << overlapped_ms << " ms/step ("
                << blocking_ms / overlapped_ms << "x)\n"
                << "  both match the serial reference (relative difference < 1e-4), every rank the same model\n";
  });
}
