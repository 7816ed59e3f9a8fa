// device_reduce_bench: the device reduce step (collectives::device::combine, reduce
// and finalize, each one cub::DeviceTransform pass) beside cudaMemcpyAsync
// device-to-device of the same bytes, its limit: a reduction that streams its operands
// once moves bytes no faster than the runtime's own device-to-device copy. The target
// is the reduce step at 85% or more of the copy's traffic bandwidth.
//
//   device_reduce_bench [-b 4K] [-e 1G] [-f 4] [-n 20] [-w 5] [--json FILE]
//
// Flags as nccl-tests has them (-n iterations, -w warmup; -i there is an additive
// step, unused here). S is the bytes of one buffer, rounded down to a multiple of 8
// (whole elements of every type here). Per size and kernel, on one stream:
// time(us) per launch, from cudaEvents around -n launches back to back; algbw = S /
// time; traffic = bytes read + written / time, as STREAM counts: copy 2S, combine
// (dst = op(dst, src)) 3S, reduce of 3 inputs into dst 4S, finalize (in place) 2S;
// xcopy = traffic / the copy's traffic at that size in this run.
//
// Each kernel is first run once on known data and compared element by element with
// a serial host computation; a mismatch prints the first wrong element and exits 1.
// Without a CUDA device it prints a SKIPPED line and exits 77 (CTest's skip code).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <collectives/device/cuda_check.hpp>
#include <collectives/device/reduce.cuh>
#include <collectives/ops/builtin.hpp>

#include "../perf/options.hpp"  // parse_bytes, parse_int: the perf programs' spellings of sizes

namespace {

namespace coll = collectives;
using coll::device::check;

// A user op on a user type, as an application writes one: arg-max over (value, index),
// ties to the lower index so that the result does not depend on operand order.
struct scored {
  float value;
  int index;
  bool operator==(const scored&) const = default;
};
struct arg_max {
  static constexpr bool commutative = true;
  COLLECTIVES_HOST_DEVICE scored operator()(const scored& a, const scored& b) const {
    return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
  }
};
static_assert(coll::reduce_op<arg_max, scored> && coll::is_commutative_v<arg_max>);

constexpr int finalize_ranks = 3;  // avg's divisor: not a power of two, so rounding is exercised

struct flags {
  std::size_t min_bytes = std::size_t(4) << 10, max_bytes = std::size_t(1) << 30, factor = 4;
  int iterations = 20, warmup = 5;
  std::string json_path;
};

// Small integers, exactly representable as float: every sum below is exact, so device
// and host agree bit for bit whatever the order of additions inside a kernel.
float value_at(int buffer, std::size_t i) { return float(int((i * 2654435761u + buffer * 40503u) % 17u) - 8); }

// A device buffer of n elements of T; freed at scope end.
template <class T>
struct device_array {
  T* data = nullptr;
  std::size_t n = 0;
  explicit device_array(std::size_t count) : n(count) { check(cudaMalloc(&data, count * sizeof(T)), "cudaMalloc"); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { cudaFree(data); }
  void upload(const std::vector<T>& from, cudaStream_t s) {
    check(cudaMemcpyAsync(data, from.data(), n * sizeof(T), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (upload)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  std::vector<T> download(cudaStream_t s) const {
    std::vector<T> to(n);
    check(cudaMemcpyAsync(to.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return to;
  }
};

// Exits 1 naming the first element where the device's result differs from the host's.
template <class T, class Show>
void require_equal(const char* kernel, std::size_t bytes, const std::vector<T>& device, const std::vector<T>& host, Show show) {
  for (std::size_t i = 0; i < host.size(); ++i)
    if (!(device[i] == host[i])) {
      std::fprintf(stderr, "device_reduce_bench: %s at %zu bytes is WRONG: element %zu is %s, the host computes %s\n",
                   kernel, bytes, i, show(device[i]).c_str(), show(host[i]).c_str());
      std::exit(1);
    }
}
std::string show_float(float x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", double(x));
  return text;
}
std::string show_scored(const scored& s) {
  char text[64];  // snprintf: g++ 12 warns falsely (-Wrestrict) on "{" + std::string
  std::snprintf(text, sizeof text, "{%.9g, %d}", double(s.value), s.index);
  return text;
}

// Microseconds per launch of `launch`, after the warmup.
double time_us(const flags& f, cudaStream_t s, const std::function<void()>& launch) {
  for (int i = 0; i < f.warmup; ++i) launch();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, s), "cudaEventRecord");
  for (int i = 0; i < f.iterations; ++i) launch();
  check(cudaEventRecord(stop, s), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) * 1e3 / f.iterations;
}

struct kernel_result {
  const char* name;
  int traffic_factor;  // bytes read + written, in multiples of S
  double us = 0;
};

// Checks, then times, every kernel at one size; returns them copy first.
std::vector<kernel_result> run_size(const flags& f, std::size_t bytes, cudaStream_t s) {
  const std::size_t n = bytes / sizeof(float), m = bytes / sizeof(scored);
  std::vector<float> a(n), b(n), c(n);
  for (std::size_t i = 0; i < n; ++i) a[i] = value_at(0, i), b[i] = value_at(1, i), c[i] = value_at(2, i);
  std::vector<scored> x(m), y(m);
  for (std::size_t i = 0; i < m; ++i) x[i] = {value_at(3, i), int(i)}, y[i] = {value_at(4, i), int(i + 7)};
  device_array<float> da(n), db(n), dc(n), dst(n);
  device_array<scored> dx(m), dy(m);
  da.upload(a, s), db.upload(b, s), dc.upload(c, s), dx.upload(x, s), dy.upload(y, s);

  auto copy = [&] { check(cudaMemcpyAsync(dst.data, da.data, n * sizeof(float), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); };
  auto combine_sum = [&] { coll::device::combine(dst.data, db.data, n, coll::sum{}, coll::operand_order::received_last, s); };
  auto combine_arg_max = [&] { coll::device::combine(dx.data, dy.data, m, arg_max{}, coll::operand_order::received_last, s); };
  auto reduce_sum = [&] { coll::device::reduce(dst.data, n, coll::sum{}, s, da.data, db.data, dc.data); };
  auto finalize_avg = [&] { coll::device::finalize(dst.data, n, coll::avg{}, finalize_ranks, s); };

  // The checks, in an order where each kernel starts from data the host knows.
  std::vector<float> want(n);
  copy();
  require_equal("copy", bytes, dst.download(s), a, show_float);
  combine_sum();  // dst holds a
  for (std::size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
  require_equal("combine sum/float", bytes, dst.download(s), want, show_float);
  combine_arg_max();
  std::vector<scored> want_scored(m);
  for (std::size_t i = 0; i < m; ++i) want_scored[i] = arg_max{}(x[i], y[i]);
  require_equal("combine arg_max/{float,int}", bytes, dx.download(s), want_scored, show_scored);
  reduce_sum();
  for (std::size_t i = 0; i < n; ++i) want[i] = (a[i] + b[i]) + c[i];
  require_equal("reduce sum/float of 3 inputs", bytes, dst.download(s), want, show_float);
  finalize_avg();
  for (std::size_t i = 0; i < n; ++i) want[i] = coll::avg{}.finalize(want[i], finalize_ranks);
  require_equal("finalize avg/float", bytes, dst.download(s), want, show_float);

  // The timed runs. Repeated combines and finalizes change the values in the buffers,
  // not the cost: the kernels are bound by memory, not by what they compute.
  std::vector<kernel_result> r = {{"copy", 2}, {"combine_sum_float", 3}, {"combine_arg_max", 3},
                                  {"reduce3_sum_float", 4}, {"finalize_avg_float", 2}};
  r[0].us = time_us(f, s, copy);
  r[1].us = time_us(f, s, combine_sum);
  r[2].us = time_us(f, s, combine_arg_max);
  r[3].us = time_us(f, s, reduce_sum);
  r[4].us = time_us(f, s, finalize_avg);
  return r;
}

int usage(int status) {
  std::fputs("usage: device_reduce_bench [-b 4K] [-e 1G] [-f 4] [-n 20] [-w 5] [--json FILE]\n"
             "  -b/-e smallest/largest buffer in bytes (K, M, G suffixes), -f size factor,\n"
             "  -n timed launches per kernel and size, -w untimed launches before them,\n"
             "  --json FILE appends one JSON object per size and kernel.\n",
             status == 0 ? stdout : stderr);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") return usage(0);
    if (i + 1 >= argc) return usage(2);
    const char* value = argv[++i];
    bool ok = true;
    auto bytes = [&](std::size_t& into) {
      const auto v = perf::parse_bytes(value);
      if (v) into = *v;
      ok = v.has_value();
    };
    auto number = [&](auto& into, int lowest) {
      const auto v = perf::parse_int(value, lowest);
      if (v) into = static_cast<std::remove_reference_t<decltype(into)>>(*v);
      ok = v.has_value();
    };
    if (arg == "-b") bytes(f.min_bytes);
    else if (arg == "-e") bytes(f.max_bytes);
    else if (arg == "-f") number(f.factor, 2);
    else if (arg == "-n") number(f.iterations, 1);
    else if (arg == "-w") number(f.warmup, 0);
    else if (arg == "--json") f.json_path = value;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "device_reduce_bench: bad flag or value: %s %s\n", argv[i - 1], value);
      return usage(2);
    }
  }
  if (f.min_bytes < sizeof(scored) || f.min_bytes > f.max_bytes) {
    std::fprintf(stderr, "device_reduce_bench: need %zu <= -b <= -e\n", sizeof(scored));
    return 2;
  }

  if (coll::device::device_count() == 0) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    std::printf("device_reduce_bench: SKIPPED: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "the runtime counts none");
    return 77;
  }

  try {
    std::FILE* json = f.json_path.empty() ? nullptr : std::fopen(f.json_path.c_str(), "a");
    if (!f.json_path.empty() && !json) {
      std::fprintf(stderr, "device_reduce_bench: cannot open --json %s for appending\n", f.json_path.c_str());
      return 2;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

    std::printf("# device_reduce_bench: CUDA device 0 (%s), one stream, %d launches timed after %d warmup\n", prop.name,
                f.iterations, f.warmup);
    std::printf("# algbw = S / time; traffic = bytes read + written / time (copy 2S, combine 3S, reduce of 3 inputs 4S,\n"
                "# finalize 2S); xcopy = traffic / copy traffic (target >= 0.85). At each size every kernel\n"
                "# is checked against the host before it is timed; a wrong element exits 1.\n");
    std::printf("#%11s |%27s |%33s |%33s |%33s |%33s\n", "", "copy d2d (cudaMemcpyAsync)", "combine sum/float",
                "combine arg_max/{float,int}", "reduce 3 inputs sum/float", "finalize avg/float");
    std::printf("#%11s |%9s%9s%9s", "size(B)", "time(us)", "algbw", "traffic");
    for (int k = 0; k < 4; ++k) std::printf(" |%9s%9s%9s%6s", "time(us)", "algbw", "traffic", "xcopy");
    std::printf("\n");

    std::vector<kernel_result> last;
    for (std::size_t step = f.min_bytes; step <= f.max_bytes; step *= f.factor) {
      const std::size_t bytes = step / sizeof(scored) * sizeof(scored);
      last = run_size(f, bytes, s);
      const double copy_traffic = 2.0 * double(bytes) / (last[0].us * 1e-6) / 1e9;
      std::printf("%12zu", bytes);
      for (const kernel_result& k : last) {
        const double algbw = double(bytes) / (k.us * 1e-6) / 1e9, traffic = algbw * k.traffic_factor;
        std::printf(" |%9.2f%9.1f%9.1f", k.us, algbw, traffic);
        if (&k != &last[0]) std::printf("%6.2f", traffic / copy_traffic);
        if (json)
          std::fprintf(json,
                       "{\"program\":\"device_reduce_bench\",\"device\":\"%s\",\"kernel\":\"%s\",\"bytes\":%zu,"
                       "\"time_us\":%.3f,\"algbw_GBps\":%.3f,\"traffic_GBps\":%.3f,\"vs_copy\":%.4f}\n",
                       prop.name, k.name, bytes, k.us, algbw, traffic, traffic / copy_traffic);
      }
      std::printf("\n");
      std::fflush(stdout);
      if (step > f.max_bytes / f.factor) break;  // the next step would overflow or pass -e
    }
    if (json) std::fclose(json);
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_reduce_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
