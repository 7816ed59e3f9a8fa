// 10: tensor-parallel and data-parallel groups from one job, by comm.split.
//
// Large models are trained on a grid of ranks. Along one side, tensor parallelism:
// each rank of a tensor-parallel group holds a slice of every weight matrix and the
// group computes each layer together. Along the other, data parallelism: the ranks
// holding the same slice, one per group, see different data and average their
// gradients. Each rank is in one group of each kind, and each group runs its own
// collectives:
//
//   rank = data_index * width + tensor_index
//   tensor-parallel group: comm.split(data_index, tensor_index)   (same data, slices of the model)
//   data-parallel group:   comm.split(tensor_index, data_index)   (same slice, different data)
//
// The model is a two-layer MLP split the Megatron way: the first layer's rows and the
// second layer's columns are sliced, so the forward pass needs one all_reduce (sum)
// in the tensor-parallel group, and the backward pass none. The slices' gradients are
// then averaged in the data-parallel group (all_reduce, avg).
//
// With 4 ranks the grid is 2 x 2; with an odd rank count the tensor-parallel width is 1.
// The example checks the parameters against a serial training of the whole model on
// every replica's data, and that the ranks of a data-parallel group agree bit for bit.
//
// usage: 10_tensor_and_data_parallel [ranks = 4] [steps = 10]     ranks as threads
//        collectives-run -n 4 10_tensor_and_data_parallel [steps]  ranks as processes

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <cmath>
#include <cstddef>
#include <iostream>
#include <span>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t inputs = 12, hidden = 24, outputs = 6, batch = 5;
constexpr float learning_rate = 0.05f;

// Replica d's sample b, and the target the model learns: a fixed function of it.
float sample(int d, int step, std::size_t b, std::size_t i) {
  return 0.25f * float(int((std::size_t(d) * 31 + std::size_t(step) * 7 + b * 5 + i * 3) % 9) - 4);
}
float target(std::span<const float> x, std::size_t o) {
  float t = 0;
  for (std::size_t i = 0; i < x.size(); ++i) t += float(int((o + 2 * i) % 5) - 2) * 0.1f * x[i];
  return t;
}
float initial_w1(std::size_t h, std::size_t i) { return 0.05f * float(int((h * 7 + i * 3) % 11) - 5); }
float initial_w2(std::size_t o, std::size_t h) { return 0.05f * float(int((o * 5 + h * 2) % 7) - 3); }

// The rows [first, first + count) of W1 (hidden x inputs) and the same columns of
// W2 (outputs x hidden): a tensor-parallel rank's slice, or the whole model.
struct mlp_slice {
  std::size_t first, count;
  std::vector<float> w1, w2;  // count x inputs, outputs x count
  mlp_slice(std::size_t f, std::size_t c) : first(f), count(c), w1(c * inputs), w2(outputs * c) {
    for (std::size_t h = 0; h < count; ++h)
      for (std::size_t i = 0; i < inputs; ++i) w1[h * inputs + i] = initial_w1(first + h, i);
    for (std::size_t o = 0; o < outputs; ++o)
      for (std::size_t h = 0; h < count; ++h) w2[o * count + h] = initial_w2(o, first + h);
  }

  // This slice's part of the output: W2[:, slice] relu(W1[slice] x). Keeps the
  // hidden activations for the backward pass.
  std::vector<float> forward(std::span<const float> x, std::vector<float>& act) const {
    act.assign(count, 0.0f);
    for (std::size_t h = 0; h < count; ++h) {
      for (std::size_t i = 0; i < inputs; ++i) act[h] += w1[h * inputs + i] * x[i];
      act[h] = std::max(act[h], 0.0f);
    }
    std::vector<float> y(outputs, 0.0f);
    for (std::size_t o = 0; o < outputs; ++o)
      for (std::size_t h = 0; h < count; ++h) y[o] += w2[o * count + h] * act[h];
    return y;
  }

  // Adds this slice's gradient of 0.5 |y - t|^2, given the whole output's error.
  void backward(std::span<const float> x, std::span<const float> act, std::span<const float> error,
                std::span<float> g1, std::span<float> g2) const {
    for (std::size_t h = 0; h < count; ++h) {
      float back = 0;
      for (std::size_t o = 0; o < outputs; ++o) {
        g2[o * count + h] += error[o] * act[h];
        back += w2[o * count + h] * error[o];
      }
      if (act[h] > 0)
        for (std::size_t i = 0; i < inputs; ++i) g1[h * inputs + i] += back * x[i];
    }
  }
};

// One replica's batch at `step`.
std::vector<std::vector<float>> batch_of(int d, int step) {
  std::vector<std::vector<float>> xs(batch, std::vector<float>(inputs));
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < inputs; ++i) xs[b][i] = sample(d, step, b, i);
  return xs;
}

// The reference: the whole model, trained on every replica's batch, the replicas'
// gradients averaged.
mlp_slice train_serially(int replicas, int steps) {
  mlp_slice model(0, hidden);
  std::vector<float> act;
  for (int s = 0; s < steps; ++s) {
    std::vector<float> g1(model.w1.size(), 0.0f), g2(model.w2.size(), 0.0f);
    for (int d = 0; d < replicas; ++d)
      for (const auto& x : batch_of(d, s)) {
        auto y = model.forward(x, act);
        for (std::size_t o = 0; o < outputs; ++o) y[o] -= target(x, o);
        model.backward(x, act, y, g1, g2);
      }
    for (std::size_t k = 0; k < g1.size(); ++k) model.w1[k] -= learning_rate * g1[k] / float(replicas);
    for (std::size_t k = 0; k < g2.size(); ++k) model.w2[k] -= learning_rate * g2[k] / float(replicas);
  }
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long steps = command.number(0, 10);
  if (!command.well_formed(1) || steps < 1 || steps > 100000) return command.usage("[steps = 10]");

  return examples::run_example(command, [&](auto& comm) {
    const int width = comm.size() % 2 == 0 ? 2 : 1;  // tensor-parallel ranks per replica
    const int tensor_index = comm.rank() % width, data_index = comm.rank() / width;
    auto tensor_group = comm.split(data_index, tensor_index);
    auto data_group = comm.split(tensor_index, data_index);
    const int replicas = data_group->size();

    const std::size_t count = hidden / std::size_t(width);
    mlp_slice mine(std::size_t(tensor_index) * count, count);
    std::vector<float> act;
    for (int s = 0; s < int(steps); ++s) {
      std::vector<float> g1(mine.w1.size(), 0.0f), g2(mine.w2.size(), 0.0f);
      for (const auto& x : batch_of(data_index, s)) {
        auto y = mine.forward(x, act);
        coll::all_reduce(*tensor_group, y, coll::sum{});  // the slices' parts: the whole output
        for (std::size_t o = 0; o < outputs; ++o) y[o] -= target(x, o);
        mine.backward(x, act, y, g1, g2);
      }
      coll::all_reduce(*data_group, g1, coll::avg{});  // the same slice's gradients, every replica's data
      coll::all_reduce(*data_group, g2, coll::avg{});
      for (std::size_t k = 0; k < g1.size(); ++k) mine.w1[k] -= learning_rate * g1[k];
      for (std::size_t k = 0; k < g2.size(); ++k) mine.w2[k] -= learning_rate * g2[k];
    }

    // Against the whole model trained serially, slice by slice.
    const auto whole = train_serially(replicas, int(steps));
    float worst = 0;
    for (std::size_t h = 0; h < count; ++h)
      for (std::size_t i = 0; i < inputs; ++i)
        worst = std::max(worst, std::abs(mine.w1[h * inputs + i] - whole.w1[(mine.first + h) * inputs + i]));
    for (std::size_t o = 0; o < outputs; ++o)
      for (std::size_t h = 0; h < count; ++h)
        worst = std::max(worst, std::abs(mine.w2[o * count + h] - whole.w2[o * hidden + mine.first + h]));
    examples::expect(worst < 1e-4f, comm.rank(), "the slice strays from the serial training by " + std::to_string(worst));
    std::vector<float> lowest(mine.w1.size()), highest(mine.w1.size());
    coll::all_reduce(*data_group, mine.w1, lowest, coll::min{});
    coll::all_reduce(*data_group, mine.w1, highest, coll::max{});
    examples::expect(lowest == highest, comm.rank(), "the replicas of one slice differ");

    // Who is in each of this rank's groups, by job rank, as the grid says.
    const int me = comm.rank();
    std::vector<int> tensor_members(static_cast<std::size_t>(width)), data_members(static_cast<std::size_t>(replicas));
    coll::all_gather(*tensor_group, std::span<const int>(&me, 1), tensor_members);
    coll::all_gather(*data_group, std::span<const int>(&me, 1), data_members);
    for (int t = 0; t < width; ++t)
      examples::expect(tensor_members[std::size_t(t)] == data_index * width + t, me, "a tensor-parallel group out of order");
    for (int d = 0; d < replicas; ++d)
      examples::expect(data_members[std::size_t(d)] == d * width + tensor_index, me, "a data-parallel group out of order");
    auto list = [](const std::vector<int>& v) {
      std::string s = "{";
      for (int x : v) s.append(s.size() > 1 ? "," : "").append(std::to_string(x));
      return s + "}";
    };
    if (examples::prints_summary(comm))
      std::cout << "tensor x data parallel MLP on " << comm.size() << " ranks: " << width << " x " << replicas
                << " grid, " << steps << " steps\n"
                << "  tensor-parallel groups: comm.split(data_index, tensor_index), " << width
                << " ranks each, an all_reduce (sum) per layer\n"
                << "  data-parallel groups:   comm.split(tensor_index, data_index), " << replicas
                << " ranks each, an all_reduce (avg) of the gradients\n"
                << "  rank 0's groups: tensor " << list(tensor_members) << ", data " << list(data_members) << "\n"
                << "  matches the serial training (max difference " << worst << "); each slice's replicas agree\n";
  });
}
