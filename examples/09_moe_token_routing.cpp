// 09: mixture-of-experts token routing: dispatch each token to the rank that holds its
// expert, run the experts, and combine the results back, with all_to_allv.
//
// Each rank holds a batch of tokens, of its own size, and two of the job's experts
// (expert e lives on rank e / 2). A gate sends each token to one expert. So every
// rank sends a different number of tokens to every other rank, decided only at run
// time: the uneven all_to_all, all_to_allv.
//   1. Each rank counts what it sends where, and an all_to_all of those counts tells
//      each rank what it will receive.
//   2. Dispatch: the tokens, grouped by destination, and the expert each is for, in
//      two all_to_allv calls in flight at once (iall_to_allv).
//   3. Each rank runs its experts on the tokens it received.
//   4. Combine: the outputs go back with the counts reversed, and each lands where its
//      token was.
// The example checks every token's output, bit for bit, against one process that runs
// every token through its expert directly.
//
// usage: 09_moe_token_routing [ranks = 4] [tokens = 300]     ranks as threads
//        collectives-run -n 4 09_moe_token_routing [tokens]  ranks as processes

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

constexpr std::size_t dim = 16;            // a token's width
constexpr int experts_per_rank = 2;

// Rank r holds tokens + 37 * r tokens; token t's values.
std::size_t token_count(int r, std::size_t tokens) { return tokens + 37 * std::size_t(r); }
float token_value(int r, std::size_t t, std::size_t k) { return std::sin(0.37f * float(t * dim + k) + float(r)); }

// The gate: token x goes to the expert whose gate vector scores it highest.
int route(const float* x, int experts) {
  int best = 0;
  float best_score = -1e30f;
  for (int e = 0; e < experts; ++e) {
    float score = 0;
    for (std::size_t k = 0; k < dim; ++k) score += x[k] * std::cos(float(e * 31 + int(k)));
    if (score > best_score) best = e, best_score = score;
  }
  return best;
}

// Expert e: y = tanh(W_e x), W_e a fixed matrix.
void run_expert(int e, const float* x, float* y) {
  for (std::size_t o = 0; o < dim; ++o) {
    float z = 0;
    for (std::size_t k = 0; k < dim; ++k) z += std::sin(float(e * 1000 + int(o * dim + k))) * x[k];
    y[o] = std::tanh(z);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long tokens_arg = command.number(0, 300);
  if (!command.well_formed(1) || tokens_arg < 0 || tokens_arg > 1'000'000) return command.usage("[tokens = 300]");
  const auto tokens = std::size_t(tokens_arg);

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank(), experts = ranks * experts_per_rank;
    const std::size_t n = token_count(r, tokens);
    std::vector<float> x(n * dim);
    for (std::size_t t = 0; t < n; ++t)
      for (std::size_t k = 0; k < dim; ++k) x[t * dim + k] = token_value(r, t, k);

    // 1. Where each token goes, the tokens grouped by destination rank, and the counts.
    std::vector<int> expert_of(n);
    std::vector<std::size_t> to_rank(std::size_t(ranks), 0);
    for (std::size_t t = 0; t < n; ++t) {
      expert_of[t] = route(&x[t * dim], experts);
      ++to_rank[std::size_t(expert_of[t] / experts_per_rank)];
    }
    std::vector<std::size_t> from_rank(static_cast<std::size_t>(ranks));
    coll::all_to_all(comm, to_rank, from_rank);  // one count to each rank, one from each

    std::vector<std::size_t> order(n);  // tokens sorted by destination, stable
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return expert_of[a] / experts_per_rank < expert_of[b] / experts_per_rank; });
    std::vector<float> send(n * dim);
    std::vector<std::int32_t> send_expert(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(&send[i * dim], &x[order[i] * dim], dim * sizeof(float));
      send_expert[i] = expert_of[order[i]];
    }

    // 2. Dispatch: the tokens and their experts, both in flight at once.
    auto times_dim = [](std::vector<std::size_t> c) {
      for (auto& v : c) v *= dim;
      return c;
    };
    const auto send_floats = times_dim(to_rank), recv_floats = times_dim(from_rank);
    const std::size_t received = std::accumulate(from_rank.begin(), from_rank.end(), std::size_t{0});
    std::vector<float> recv(received * dim);
    std::vector<std::int32_t> recv_expert(received);
    auto payload = coll::iall_to_allv(comm, send, send_floats, recv, recv_floats);
    auto labels = coll::iall_to_allv(comm, send_expert, to_rank, recv_expert, from_rank);
    coll::wait_all(payload, labels);

    // 3. The experts of this rank, on what it received.
    std::vector<float> out(received * dim);
    for (std::size_t i = 0; i < received; ++i) {
      examples::expect(recv_expert[i] / experts_per_rank == r, r, "received a token for another rank's expert");
      run_expert(recv_expert[i], &recv[i * dim], &out[i * dim]);
    }

    // 4. Combine: back with the counts reversed, then into each token's place.
    std::vector<float> back(n * dim), y(n * dim);
    coll::all_to_allv(comm, out, recv_floats, back, send_floats);
    for (std::size_t i = 0; i < n; ++i) std::memcpy(&y[order[i] * dim], &back[i * dim], dim * sizeof(float));

    // The reference: each token through its expert, here.
    std::vector<float> want(dim);
    for (std::size_t t = 0; t < n; ++t) {
      run_expert(route(&x[t * dim], experts), &x[t * dim], want.data());
      examples::expect(std::memcmp(want.data(), &y[t * dim], dim * sizeof(float)) == 0, r,
             "token " + std::to_string(t) + " came back with another output than its expert gives");
    }

    const auto all_tokens = coll::all_reduce(comm, std::uint64_t(n), coll::sum{});
    std::vector<std::size_t> per_rank(static_cast<std::size_t>(ranks));
    coll::all_gather(comm, std::span(&received, 1), per_rank);
    if (r == 0) {
      std::cout << all_tokens << " tokens on " << ranks << " ranks, " << experts << " experts (" << experts_per_rank
                << " per rank)\n  tokens each rank's experts took:";
      for (auto c : per_rank) std::cout << " " << c;
      std::cout << "\n  every token's output matches its expert's, bit for bit\n";
    }
  });
}
