// The perf programs' command line: nccl-tests' flags and meanings, plus this
// project's --algo, --transport, --in-place and --json. Shared by this library's
// programs and the Open MPI twin, so both take the same flags and check the same way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collective.hpp"
#include "data.hpp"

namespace perf {

struct options {
  collective which = collective::all_reduce;
  std::size_t min_bytes = std::size_t(32) << 20, max_bytes = std::size_t(32) << 20;  // nccl-tests' defaults
  std::size_t step_factor = 2, step_bytes = 0;  // step_bytes > 0: additive steps instead
  int iterations = 20, warmup_iterations = 5;
  int batches = 1;  // the timed calls in this many batches; the median batch's time
  bool check = true;
  std::vector<op_kind> ops{op_kind::sum};
  std::vector<element_type> types{element_type::float32};
  int root = 0;
  std::string algorithm = "auto";  // a name from library_calls.hpp's list, or auto
  std::string transport;           // empty: as the launcher/environment has it
  bool in_place = false;
  std::string json_path;
  bool corrupt_for_test = false;  // flips one result element, to prove the check fails

  // The batches the calls are timed in: no more than the calls (each batch has one).
  int timed_batches() const { return std::clamp(batches, 1, iterations); }
};

// Who parses: the two programs differ in --algo and --transport only.
enum class program { collectives, openmpi };

// Whether this library's program was built with the rdma transport (libfabric found:
// bench/CMakeLists.txt defines COLLECTIVES_PERF_WITH_RDMA and links collectives::rdma).
#if defined(COLLECTIVES_PERF_WITH_RDMA)
inline constexpr bool built_with_rdma = true;
#else
inline constexpr bool built_with_rdma = false;
#endif

// `algorithms`: what --algo takes in this library's programs (library_calls.hpp lists them).
inline void print_usage(std::FILE* to, program who, const std::string& algorithms = {}) {
  if (who == program::collectives)
    std::fputs("usage: <collective>_perf [flags]               e.g. all_reduce_perf -b 8 -e 64M -f 2\n"
               "       collectives_perf <collective> [flags]   (the <collective>_perf programs are links to it)\n"
               "  run: collectives-run -n 4 [--transport shm|tcp|rdma] all_reduce_perf -b 8 -e 64M -f 2\n"
               "       (without a launcher it runs as one rank)\n",
               to);
  else
    std::fputs("usage: mpi_perf <collective> [flags]           (or as mpi_<collective>_perf [flags])\n"
               "  run: mpirun --mca btl self,tcp -n 4 mpi_perf all_reduce -b 8 -e 64M -f 2\n",
               to);
  std::fputs(
      "collectives: all_reduce all_gather reduce_scatter broadcast reduce all_to_all gather scatter\n"
      "  -b, --minbytes N       smallest size in bytes (K, M, G suffixes: powers of 1024); default 32M\n"
      "  -e, --maxbytes N       largest size; default 32M\n"
      "  -f, --stepfactor N     multiply the size by N each step; default 2\n"
      "  -i, --stepbytes N      add N bytes each step instead\n"
      "  -n, --iters N          timed calls per size; default 20\n"
      "  -w, --warmup_iters N   untimed calls before them; default 5\n"
      "      --batches K        time the -n calls as K batches and take the median batch, so that\n"
      "                         a stall of the machine moves one batch, not the figure; default 1\n"
      "  -c, --check 0|1        check every element of every rank's result; default 1\n"
      "  -o, --op OP            sum prod min max avg absmax (a user functor), or all; default sum\n"
      "  -d, --datatype TYPE    float double int32 int64 uint8, or all; default float\n"
      "  -r, --root N           root of broadcast, reduce, gather, scatter; default 0\n",
      to);
  if (who == program::collectives) {
    std::fprintf(to, "      --algo A           %s; default auto\n", algorithms.c_str());
    std::fputs(built_with_rdma
                   ? "      --transport T      shm tcp rdma auto: sets COLLECTIVES_TRANSPORT for this program\n"
                     "                         (collectives-run --transport does the same for the whole job);\n"
                     "                         rdma's libfabric provider: COLLECTIVES_FABRIC_PROVIDER=tcp|shm|...\n"
                   : "      --transport T      shm tcp auto: sets COLLECTIVES_TRANSPORT for this program\n"
                     "                         (collectives-run --transport does the same for the whole job;\n"
                     "                         rdma: not in this build, which found no libfabric)\n",
               to);
  } else {
    std::fputs("      --algo auto        Open MPI's own choice (the only one offered)\n"
               "      --transport NAME   label for the output (mpirun --mca btl picks the real one);\n"
               "                         default: read from OMPI_MCA_btl\n",
               to);
  }
  std::fputs(
      "      --in-place         time the in-place form\n"
      "      --json FILE        append one JSON object per result line (\"wrong\": null with -c 0)\n"
      "  -h, --help             this text\n"
      "time: after a barrier, -n calls back to back timed as one, divided by -n (with --batches, the\n"
      "median batch's time per call); the slowest rank's time.\n"
      "algbw = size / time; busbw = algbw * factor (all_reduce 2(P-1)/P; all_gather, reduce_scatter,\n"
      "all_to_all, gather, scatter (P-1)/P; broadcast, reduce 1). Exit status: 0, 1 if any element was\n"
      "wrong or a call failed, 2 for bad flags.\n",
      to);
  if (who == program::openmpi)
    std::fputs("avg: MPI has none; it is MPI_SUM, then one division by P on each rank holding a result (timed).\n",
               to);
}

// A size: digits and an optional K, M or G (powers of 1024).
inline std::optional<std::size_t> parse_bytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t shift = 0;
  switch (text.back()) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    default: break;
  }
  if (shift) text.remove_suffix(1);
  if (text.empty() || text.size() > 18) return std::nullopt;
  std::size_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + std::size_t(c - '0');
  }
  if (shift && n > (SIZE_MAX >> shift)) return std::nullopt;
  return n << shift;
}

inline std::optional<int> parse_int(std::string_view text, int lowest) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < lowest) return std::nullopt;
  return n;
}

struct parse_result {
  options opts;
  bool help = false;
  std::string error;  // non-empty: bad command line
};

// Parses argv[first..]; flags take their value as the next argument, attached (-b8)
// or after '=' (--minbytes=8).
inline parse_result parse_options(int argc, char** argv, int first, program who) {
  parse_result r;
  options& o = r.opts;
  bool factor_given = false, step_given = false;
  auto fail = [&](std::string message) {
    if (r.error.empty()) r.error = std::move(message);
  };
  for (int i = first; i < argc && r.error.empty(); ++i) {
    std::string_view arg = argv[i];
    std::string flag(arg);
    std::optional<std::string> value;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        flag = std::string(arg.substr(0, eq));
        value = std::string(arg.substr(eq + 1));
      }
    } else if (arg.size() > 2 && arg[0] == '-') {
      flag = std::string(arg.substr(0, 2));
      value = std::string(arg.substr(2));
    }
    auto is = [&](const char* short_name, const char* long_name) {
      return (short_name && flag == short_name) || flag == long_name;
    };
    if (is("-h", "--help")) { r.help = true; continue; }
    if (is(nullptr, "--in-place")) { o.in_place = true; continue; }
    if (is(nullptr, "--corrupt-for-test")) { o.corrupt_for_test = true; continue; }
    // Every other flag takes a value.
    auto take = [&]() -> std::optional<std::string> {
      if (value) return value;
      if (i + 1 < argc) return std::string(argv[++i]);
      fail(flag + " needs a value");
      return std::nullopt;
    };
    auto bytes = [&](std::size_t& into) {
      if (auto v = take()) {
        if (auto n = parse_bytes(*v)) into = *n;
        else fail(flag + " " + *v + ": expected a byte count such as 8, 4K, 64M or 1G");
      }
    };
    auto number = [&](int& into, int lowest) {
      if (auto v = take()) {
        if (auto n = parse_int(*v, lowest)) into = *n;
        else fail(flag + " " + *v + ": expected a whole number, at least " + std::to_string(lowest));
      }
    };
    if (is("-b", "--minbytes")) bytes(o.min_bytes);
    else if (is("-e", "--maxbytes")) bytes(o.max_bytes);
    else if (is("-f", "--stepfactor")) {
      int f = 0;
      number(f, 2);
      o.step_factor = std::size_t(f);
      factor_given = true;
    } else if (is("-i", "--stepbytes")) {
      bytes(o.step_bytes);
      step_given = true;
      if (r.error.empty() && o.step_bytes == 0) fail("-i 0: the step must be at least one byte");
    } else if (is("-n", "--iters")) number(o.iterations, 1);
    else if (is("-w", "--warmup_iters")) number(o.warmup_iterations, 0);
    else if (is(nullptr, "--batches")) number(o.batches, 1);
    else if (is("-r", "--root")) number(o.root, 0);
    else if (is("-c", "--check")) {
      if (auto v = take()) {
        if (*v == "0" || *v == "1") o.check = *v == "1";
        else fail("-c " + *v + ": expected 0 or 1");
      }
    } else if (is("-o", "--op")) {
      if (auto v = take()) {
        if (*v == "all") o.ops.assign(std::begin(all_ops), std::end(all_ops));
        else if (auto op = op_named(*v)) o.ops = {*op};
        else fail("-o " + *v + ": expected sum, prod, min, max, avg, absmax or all");
      }
    } else if (is("-d", "--datatype")) {
      if (auto v = take()) {
        if (*v == "all") o.types.assign(std::begin(all_types), std::end(all_types));
        else if (auto t = element_type_named(*v)) o.types = {*t};
        else fail("-d " + *v + ": expected float, double, int32, int64, uint8 or all");
      }
    } else if (is(nullptr, "--algo")) {
      if (auto v = take()) {
        o.algorithm = *v;  // this library's programs check it against their list of algorithms
        if (who == program::openmpi && *v != "auto") fail("--algo " + *v + ": Open MPI's twin offers only auto (its own choice)");
      }
    } else if (is(nullptr, "--transport")) {
      if (auto v = take()) {
        o.transport = *v;
        if (who == program::collectives && *v == "rdma" && !built_with_rdma)
          fail("--transport rdma: this program was built without the rdma transport (no libfabric when CMake "
               "configured it: install libfabric-dev and reconfigure)");
        else if (who == program::collectives && *v != "shm" && *v != "tcp" && *v != "rdma" && *v != "auto")
          fail("--transport " + *v + (built_with_rdma ? ": expected shm, tcp, rdma or auto" : ": expected shm, tcp or auto"));
        if (v->empty()) fail("--transport needs a name");
      }
    } else if (is(nullptr, "--json")) {
      if (auto v = take()) o.json_path = *v;
    } else {
      fail("unknown flag " + std::string(arg));
    }
  }
  if (r.error.empty() && factor_given && step_given) fail("-f and -i both given: pick one way to step");
  if (r.error.empty() && step_given) o.step_factor = 1;
  if (r.error.empty() && o.min_bytes > o.max_bytes) fail("-b is larger than -e");
  return r;
}

// The sizes to run, from -b to -e by -f or -i. From 0 a factor steps to 1 first.
inline std::vector<std::size_t> sizes_of(const options& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    const std::size_t next = o.step_factor > 1 ? (s == 0 ? 1 : s * o.step_factor) : s + o.step_bytes;
    if (next <= s) break;  // overflow
    s = next;
  }
  return sizes;
}

}  // namespace perf
