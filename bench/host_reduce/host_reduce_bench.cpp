// The host reduce loop (memory_ops<host_memory>::combine) beside its limits, all in
// one run on the same buffers: a plain streaming loop written the obvious way, and
// memcpy of the same bytes.
//
// Sizes are the bytes of one buffer (y, and x alike): 4 KiB (L1), 256 KiB (L2),
// 4 MiB (L3), 64 MiB (DRAM).
//
// bytes_per_second counts the bytes the loop reads plus the bytes it writes, as STREAM
// does: y = op(y, x) reads x and y and writes y, 3 * n * sizeof(T); memcpy reads x and
// writes y, 2 * n * sizeof(T). The point is the ratio combine/stream at each size.
//
// Before timing anything, each combine is checked against its plain loop (bit for
// bit, with a tail that is not a whole block); a mismatch fails the program.
//
// usage: host_reduce_bench [google benchmark flags], e.g.
//   host_reduce_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include <collectives/ops/builtin.hpp>
#include <collectives/ops/host_reduce.hpp>

namespace {

using collectives::operand_order;
using host_ops = collectives::memory_ops<collectives::host_memory>;

// A user op as an application would write one: a sum that saturates at a cap.
struct capped_sum {
  static constexpr bool commutative = true;
  static constexpr float cap = 1e30f;
  float operator()(float a, float b) const { return std::min(a + b, cap); }
};
static_assert(collectives::reduce_op<capped_sum, float> && collectives::is_commutative_v<capped_sum>);

// The plain loops: no __restrict, no blocks, the compiler's own choices.
__attribute__((noinline)) void stream_add(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}
__attribute__((noinline)) void stream_max(std::int32_t* y, const std::int32_t* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::max(y[i], x[i]);
}
__attribute__((noinline)) void stream_capped_sum(float* y, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::min(y[i] + x[i], capped_sum::cap);
}

// The library's loop behind a call boundary too, so both are compiled alike and each
// has its own symbol to find in the disassembly.
template <class T, class Op>
__attribute__((noinline)) void library_combine(T* y, const T* x, std::size_t n, Op op, operand_order order) {
  host_ops::combine(y, x, n, op, order);
}

// x and y in one allocation, y half a page past x modulo 4096: every benchmark gets
// the same placement (the allocator's varies from one allocation to the next), and one
// where a load of x is never a multiple of 4096 bytes from a recent store to y, which
// the core would take for a dependency ("4K aliasing").
template <class T>
struct buffers {
  static constexpr std::size_t page = 4096;
  std::size_t n;
  decltype(host_ops::allocate<unsigned char>(0)) room;
  T* x;
  T* y;
  explicit buffers(std::size_t bytes)
      : n(bytes / sizeof(T)),
        room(host_ops::allocate<unsigned char>((bytes + page - 1) / page * page + page / 2 + bytes)),
        x(reinterpret_cast<T*>(room.get())),
        y(reinterpret_cast<T*>(room.get() + (bytes + page - 1) / page * page + page / 2)) {
    // Touched before timing (no page faults inside), with values that stay normal floats.
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<T>(i % 7 + 1);
      y[i] = static_cast<T>(i % 5);
    }
  }
};

template <class T, class Loop>
void run(benchmark::State& state, Loop loop, std::size_t traffic_per_element) {
  buffers<T> b(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    loop(b.y, b.x, b.n);
    benchmark::DoNotOptimize(b.y);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * b.n * traffic_per_element));
}

template <class T, class Op>
void combine_bench(benchmark::State& state, Op op, operand_order order) {
  run<T>(state, [&](T* y, const T* x, std::size_t n) { library_combine(y, x, n, op, order); }, 3 * sizeof(T));
}

template <class T, class Plain>
void stream_bench(benchmark::State& state, Plain plain) {
  run<T>(state, plain, 3 * sizeof(T));
}

template <class T>
void memcpy_bench(benchmark::State& state) {
  run<T>(state, [](T* y, const T* x, std::size_t n) { std::memcpy(y, x, n * sizeof(T)); }, 2 * sizeof(T));
}

// The library's result must equal the plain loop's, bit for bit, in both operand
// orders (the ops here give the same value either way round).
template <class T, class Op, class Plain>
bool same_as_plain(const char* name, Op op, Plain plain) {
  constexpr std::size_t n = 1000 + 13;  // whole blocks and a tail
  bool ok = true;
  for (auto order : {operand_order::received_last, operand_order::received_first}) {
    buffers<T> library(n * sizeof(T)), reference(n * sizeof(T));
    for (std::size_t i = 0; i < n; ++i) {  // negatives and ties too, so max and the cap matter
      library.x[i] = reference.x[i] = static_cast<T>((i * 37) % 101) - T(50);
      library.y[i] = reference.y[i] = static_cast<T>((i * 53) % 97) - T(48);
    }
    if constexpr (std::is_floating_point_v<T>) library.x[3] = reference.x[3] = capped_sum::cap;
    host_ops::combine(library.y, library.x, n, op, order);
    plain(reference.y, reference.x, n);
    if (std::memcmp(library.y, reference.y, n * sizeof(T)) != 0) {
      std::fprintf(stderr, "host_reduce_bench: combine %s (%s) differs from the plain loop\n", name,
                   order == operand_order::received_last ? "received_last" : "received_first");
      ok = false;
    }
  }
  return ok;
}

constexpr const char* order_name(operand_order order) {
  return order == operand_order::received_last ? "received_last" : "received_first";
}

}  // namespace

int main(int argc, char** argv) {
  bool ok = same_as_plain<float>("sum/float", collectives::sum{}, stream_add);
  ok = same_as_plain<std::int32_t>("max/int32", collectives::max{}, stream_max) && ok;
  ok = same_as_plain<float>("capped_sum/float", capped_sum{}, stream_capped_sum) && ok;
  if (!ok) return 1;

  const auto sizes = [](benchmark::internal::Benchmark* b) {
    for (std::int64_t bytes : {4 << 10, 256 << 10, 4 << 20, 64 << 20}) b->Arg(bytes);
  };
  for (auto order : {operand_order::received_last, operand_order::received_first}) {
    const std::string suffix = std::string("/") + order_name(order);
    benchmark::RegisterBenchmark(("combine/sum/float" + suffix).c_str(), combine_bench<float, collectives::sum>,
                                 collectives::sum{}, order)->Apply(sizes);
    benchmark::RegisterBenchmark(("combine/max/int32" + suffix).c_str(),
                                 combine_bench<std::int32_t, collectives::max>, collectives::max{}, order)
        ->Apply(sizes);
    benchmark::RegisterBenchmark(("combine/capped_sum/float" + suffix).c_str(), combine_bench<float, capped_sum>,
                                 capped_sum{}, order)->Apply(sizes);
  }
  // The narrow types' sums, through float: AVX-512 BF16 for bf16 and F16C for fp16
  // where the CPU has them, else the AVX2 or baseline loops (ops/host_reduce.hpp).
  benchmark::RegisterBenchmark("combine/sum/bf16/received_last", combine_bench<collectives::bf16, collectives::sum>,
                               collectives::sum{}, operand_order::received_last)->Apply(sizes);
  benchmark::RegisterBenchmark("combine/sum/fp16/received_last", combine_bench<collectives::fp16, collectives::sum>,
                               collectives::sum{}, operand_order::received_last)->Apply(sizes);
  benchmark::RegisterBenchmark("stream/add/float", stream_bench<float, decltype(&stream_add)>, stream_add)
      ->Apply(sizes);
  benchmark::RegisterBenchmark("stream/max/int32", stream_bench<std::int32_t, decltype(&stream_max)>, stream_max)
      ->Apply(sizes);
  benchmark::RegisterBenchmark("stream/capped_sum/float", stream_bench<float, decltype(&stream_capped_sum)>,
                               stream_capped_sum)
      ->Apply(sizes);
  benchmark::RegisterBenchmark("memcpy", memcpy_bench<float>)->Apply(sizes);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
