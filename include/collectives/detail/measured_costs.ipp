// The link measurement's schedule and the reduction's figure (measured_costs.hpp):
// inline in header-only use, compiled once into collectives::compiled with
// COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include "measured_costs.hpp"

namespace collectives::detail {

schedule ring_steps(int next, int previous, std::size_t bytes, int rounds, int burst, std::size_t marching_through) {
  schedule s;
  std::vector<op_id> arrived, received;  // received: each round's receive
  // Marching, a receive waits for the one at its place a lap before, never writing
  // the same bytes at once.
  const std::size_t places = marching_through ? std::max<std::size_t>(1, marching_through / bytes) : 0;
  for (int i = 0; i < rounds; ++i) {
    const std::size_t at = marching_through ? std::size_t(i) * bytes % marching_through : 0;
    const region out{buffer_id::input, at, bytes}, in{buffer_id::output, at, bytes};
    std::vector<op_id> step;
    for (int m = 0; m < burst; ++m) {
      const auto tag = static_cast<std::uint32_t>(i * burst + m);
      const operation send{.kind = op_kind::send, .peer = next, .tag = tag, .src = out};
      const operation recv{.kind = op_kind::recv, .peer = previous, .tag = tag, .dst = m ? s.reserve_scratch(bytes) : in};
      s.add(send, arrived);
      const bool lapped = marching_through && std::size_t(i) >= places;
      step.push_back(s.add(recv, lapped ? std::vector<op_id>{received[std::size_t(i) - places]} : arrived));
    }
    received.push_back(step.front());
    if (!marching_through) arrived = std::move(step);  // marching slices stream, as a pipeline's do
  }
  return s;
}

// Seconds per byte of `pass` over 1 MiB of floats: the median of five, after a first
// run that pages the buffers in.
template <class Pass>
double seconds_per_byte_of(Pass&& pass) {
  std::vector<float> a(std::size_t(1) << 18, 1.0f), b(a.size(), 2.0f);
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pass(a, b);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  volatile float keep = a[a.size() / 2];
  (void)keep;
  std::sort(t.begin() + 1, t.end());
  return std::max(1e-13, t[3] / double(a.size() * sizeof(float)));
}

double measure_reduction() {
  return seconds_per_byte_of([](std::vector<float>& a, const std::vector<float>& b) {
    std::transform(a.begin(), a.end(), b.begin(), a.begin(), std::plus<float>());
  });
}

double measure_copy() {
  return seconds_per_byte_of([](std::vector<float>& a, const std::vector<float>& b) {
    std::memcpy(a.data(), b.data(), a.size() * sizeof(float));
  });
}

}  // namespace collectives::detail
