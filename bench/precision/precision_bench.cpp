// precision_bench: the accuracy and the cost of the low-precision sums (docs/precision.md).
//
//   precision_bench accuracy [elements = 65536]
//     On threads (inproc), all_reduce of values uniform in [-1, 1] rounded to bf16, fp16,
//     fp8_e4m3 and fp8_e5m2 at 2, 4, 8 and 64 ranks, with the ring: the error of each
//     result in ulps of its type against the float64 sum, largest and mean, for the plain
//     sum (rounded at each hop) and accumulate_as<float> (rounded once). Exits 1 when a
//     wide sum is more than 1 ulp off anywhere: the target of docs/precision.md.
//
//   collectives-run -n P --transport shm|tcp precision_bench cost [float bytes = 64M] [rounds = 7] [only]
//     Times, paired and alternated round by round, all_reduce of the same element count
//     as float sum, float reproducible_sum, bf16 sum and bf16 accumulate_as<float>; prints
//     the slowest rank's median of each and the ratios the targets name. Every result is
//     checked against the sum computed here. `only` (0 to 3) times one of them alone,
//     for a profiler.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/transport/automatic.hpp>

namespace coll = collectives;

namespace {

// The spacing of T's values at |x|: the ulp a result's error is counted in.
template <class T>
double ulp_at(double x) {
  const float f = float(T(float(std::fabs(x))));
  const float up = float(T::from_bits(static_cast<decltype(T{}.bits)>(T(f).bits + 1)));
  return double(up) - double(f);
}

// In ulps of the exact sum (a sum that cancels to near zero has tiny ulps, so a plain
// sum's error there counts many), and the largest in ulps of 1, the inputs' scale.
struct error_stats {
  double largest = 0, mean = 0, largest_of_one = 0;
};

template <class T, class Op>
error_stats error_of(int ranks, std::size_t n, Op op) {
  std::mt19937 gen(unsigned(ranks * 1000 + sizeof(T)));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<T>> given(static_cast<std::size_t>(ranks), std::vector<T>(n));
  for (auto& v : given)
    for (auto& x : v) x = T(dist(gen));
  std::vector<T> result;
  coll::run_ranks(ranks, [&](coll::communicator<coll::inproc>& comm) {
    auto data = given[std::size_t(comm.rank())];
    coll::all_reduce<coll::ring>(comm, data, op);
    if (comm.rank() == 0) result = data;
  });
  error_stats e;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (const auto& v : given) exact += double(float(v[i]));  // exact: 64 terms of 4-8 bits near 1
    const double off = std::fabs(double(float(result[i])) - exact) / ulp_at<T>(exact);
    e.largest = std::max(e.largest, off);
    e.mean += off / double(n);
    e.largest_of_one = std::max(e.largest_of_one, std::fabs(double(float(result[i])) - exact) / ulp_at<T>(1.0));
  }
  return e;
}

int accuracy(std::size_t n) {
  std::printf("| type | ranks | per hop: max ulps | mean | max in ulps of 1 | accumulate_as<float>: max ulps | mean | max in ulps of 1 |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  bool met = true;
  auto row = [&]<class T>(const char* name) {
    for (int ranks : {2, 4, 8, 64}) {
      const auto hop = error_of<T>(ranks, n, coll::sum{});
      const auto wide = error_of<T>(ranks, n, coll::accumulate_as<float>(coll::sum{}));
      met = met && wide.largest <= 1.0;
      std::printf("| %s | %d | %.3g | %.3g | %.3g | %.2f | %.3f | %.3g |\n", name, ranks, hop.largest, hop.mean, hop.largest_of_one,
                  wide.largest, wide.mean, wide.largest_of_one);
    }
  };
  row.template operator()<coll::bf16>("bf16");
  row.template operator()<coll::fp16>("fp16");
  row.template operator()<coll::fp8_e4m3>("fp8_e4m3");
  row.template operator()<coll::fp8_e5m2>("fp8_e5m2");
  std::printf("\n%s\n", met ? "target met: every wide sum within 1 ulp of the float64 sum"
                            : "TARGET MISSED: a wide sum is more than 1 ulp off");
  return met ? 0 : 1;
}

using comm_t = coll::communicator<coll::automatic_transport>;

// One variant: a call on this rank's data, and a check of its result.
struct variant {
  const char* name;
  std::function<void()> call;
  std::function<bool()> right;
};

int cost(comm_t& comm, std::size_t bytes, int rounds, int only) {
  const std::size_t n = bytes / sizeof(float);
  const int p = comm.size();
  // Small integers: every sum is exact in each type, so each result is checkable.
  auto value = [](int rank, std::size_t i) { return float(int((std::size_t(rank) * 7 + i) % 9) - 4); };
  auto total = [&](std::size_t i) {
    float s = 0;
    for (int r = 0; r < p; ++r) s += value(r, i);
    return s;
  };
  std::vector<float> f(n), f_in(n);
  std::vector<coll::bf16> h(n), h_in(n);
  for (std::size_t i = 0; i < n; ++i) {
    f_in[i] = value(comm.rank(), i);
    h_in[i] = coll::bf16(f_in[i]);
  }
  auto check = [&](auto& out) {
    for (std::size_t i = 0; i < n; i += 4099)
      if (float(out[i]) != total(i)) return false;
    return n == 0 || float(out[n - 1]) == total(n - 1);
  };
  std::vector<variant> variants{
      {"float sum", [&] { coll::all_reduce(comm, f_in, f, coll::sum{}); }, [&] { return check(f); }},
      {"float reproducible_sum", [&] { coll::all_reduce(comm, f_in, f, coll::reproducible_sum{}); }, [&] { return check(f); }},
      {"bf16 sum", [&] { coll::all_reduce(comm, h_in, h, coll::sum{}); }, [&] { return check(h); }},
      {"bf16 accumulate_as<float>", [&] { coll::all_reduce(comm, h_in, h, coll::accumulate_as<float>(coll::sum{})); },
       [&] { return check(h); }},
  };
  if (only >= 0 && only < int(variants.size())) {
    for (int round = 0; round <= rounds; ++round) variants[std::size_t(only)].call();
    return variants[std::size_t(only)].right() ? 0 : 1;
  }
  std::vector<std::vector<double>> times(variants.size());
  bool right = true;
  for (int round = 0; round <= rounds; ++round)  // round 0 warms up
    for (std::size_t k = 0; k < variants.size(); ++k) {
      auto& v = variants[(k + std::size_t(round)) % variants.size()];  // each round starts with the next one
      coll::barrier(comm);
      const auto start = std::chrono::steady_clock::now();
      v.call();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      right = right && v.right();
      if (round > 0) times[std::size_t(&v - variants.data())].push_back(t);
    }
  std::vector<double> median(variants.size());
  for (std::size_t k = 0; k < variants.size(); ++k) {
    std::sort(times[k].begin(), times[k].end());
    median[k] = coll::all_reduce(comm, times[k][times[k].size() / 2], coll::max{});
  }
  right = coll::all_reduce(comm, int(right), coll::min{}) == 1;
  if (comm.rank() == 0) {
    std::printf("# %s, %d ranks, %zu elements (%zu bytes of float), %d rounds, slowest rank's median\n",
                std::string(comm.transport().name()).c_str(), p, n, bytes, rounds);
    for (std::size_t k = 0; k < variants.size(); ++k) std::printf("%-28s %10.3f ms\n", variants[k].name, median[k] * 1e3);
    std::printf("reproducible / float        %6.2fx  (target <= 2)\n", median[1] / median[0]);
    std::printf("wide bf16 / bf16            %6.2fx  (target <= 1.6)\n", median[3] / median[2]);
    std::printf("bf16 / float                %6.2fx  (target about 0.5)\n", median[2] / median[0]);
    std::printf("%s\n", right ? "results checked" : "WRONG RESULTS");
  }
  return right ? 0 : 1;
}

std::size_t parse_bytes(const char* text) {
  char* end = nullptr;
  std::size_t v = std::strtoull(text, &end, 10);
  if (*end == 'K') v <<= 10;
  else if (*end == 'M') v <<= 20;
  else if (*end == 'G') v <<= 30;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "accuracy") return accuracy(argc > 2 ? parse_bytes(argv[2]) : 65536);
    if (mode == "cost") {
      comm_t comm(coll::automatic_transport::from_env(), std::chrono::seconds(600));
      return cost(comm, argc > 2 ? parse_bytes(argv[2]) : 64u << 20, argc > 3 ? std::atoi(argv[3]) : 7,
                  argc > 4 ? std::atoi(argv[4]) : -1);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: precision_bench accuracy [elements] | cost [float bytes] [rounds] [only: 0-3]\n");
  return 2;
}
