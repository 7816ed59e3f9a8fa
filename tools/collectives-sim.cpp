// collectives-sim: the library's plans for one collective, run on a simulated cluster
// of many ranks in this one process (sizes only), with the perf programs' flags:
//   collectives-sim all_reduce --ranks 1024 --ranks-per-host 8 -b 1M -e 64M -f 4
// It prints the nccl-tests columns for each algorithm and size, and what `automatic`
// picks beside the fastest; with --plot, a crossover plot drawn by collectives-sim-plot.py.
// docs/simulation.md describes the model.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/detail/cost_file.hpp>
#include <collectives/simulation.hpp>

#include "../bench/perf/options.hpp"

namespace coll = collectives;

namespace {

struct sim_flags {
  int ranks = 16;
  int ranks_per_host = 0;  // 0: the model's
  std::string model = "nvlink";
  double oversubscription = 0;  // 0: the model's
  int hosts_per_leaf = -1;      // -1: the model's
  bool nic_per_host = false, no_sharing = false;
  std::string costs;  // a cost file (COLLECTIVES_TUNE_FILE) as the model
  std::string slow_rank, slow_link;  // RANK:FACTOR
  std::string plot;   // a PNG to draw the rows into
};

using run_function = coll::simulation_result (*)(coll::sim_group&, const coll::simulation_request&);

template <class Algorithm, class Kind>
coll::simulation_result run_one(coll::sim_group& cluster, const coll::simulation_request& r) {
  return coll::simulate<Algorithm>(cluster, Kind{}, r);
}

struct candidate {
  const char* name;
  run_function run;
};

template <class Kind, class... Algorithms>
std::vector<candidate> candidates_of() {
  return {candidate{Algorithms::name, &run_one<Algorithms, Kind>}..., candidate{"automatic", &run_one<coll::automatic, Kind>}};
}

std::vector<candidate> candidates(perf::collective c) {
  using namespace coll;
  switch (c) {
    case perf::collective::all_reduce:
      return candidates_of<kind::all_reduce, ring, double_binary_tree, direct, halving_doubling, hierarchical<>>();
    case perf::collective::all_gather: return candidates_of<kind::all_gather, ring, direct, halving_doubling>();
    case perf::collective::reduce_scatter: return candidates_of<kind::reduce_scatter, ring, direct, halving_doubling>();
    case perf::collective::broadcast: return candidates_of<kind::broadcast, ring, double_binary_tree, direct>();
    case perf::collective::reduce: return candidates_of<kind::reduce, ring, double_binary_tree, direct>();
    case perf::collective::all_to_all: return candidates_of<kind::all_to_all, direct>();
    case perf::collective::gather: return candidates_of<kind::gather, direct>();
    case perf::collective::scatter: return candidates_of<kind::scatter, direct>();
  }
  return {};
}

void usage(std::FILE* to) {
  std::fputs("usage: collectives-sim <collective> [--ranks N] [model flags] [perf flags]\n"
             "  e.g. collectives-sim all_reduce --ranks 8192 --ranks-per-host 8 --algo ring -b 64M -e 64M\n"
             "  --ranks N              ranks of the simulated cluster; default 16\n"
             "  --model NAME           nvlink: 8 GPUs per host on NVLink, a 400 Gb/s NIC each, shared\n"
             "                         bandwidth (default); uniform: every link alike (1 us, 25 GB/s), each\n"
             "                         port one message at a time (the textbook's model)\n"
             "  --costs FILE           the link figures of a cost file that COLLECTIVES_TUNE=1 saved\n"
             "                         (COLLECTIVES_TUNE_FILE, docs/tuning.md) as the model, ports one\n"
             "                         message at a time\n"
             "  --ranks-per-host K     ranks per host; default the model's (nvlink: 8, uniform: 1; a cost file: all)\n"
             "  --oversubscription F   a leaf switch's uplinks carry 1/F of its hosts' NICs (F >= 1)\n"
             "  --hosts-per-leaf H     hosts under one leaf switch (nvlink: 16)\n"
             "  --nic-per-host         one NIC per host, shared by its ranks (else one per rank)\n"
             "  --no-sharing           each port sends one message at a time instead of sharing\n"
             "  --slow-rank R:F        a straggler: rank R's ports and core take F times as long\n"
             "  --slow-link R:F        rank R's link to the other hosts (its NIC, or its host's) F times slower\n"
             "  --algo NAME            one algorithm (ring, double_binary_tree, direct, halving_doubling,\n"
             "                         hierarchical, automatic); default: all that implement the collective\n"
             "  -b, -e, -f, -i, -r     sizes and root as the perf programs take them (-d float only)\n"
             "  --json FILE            also write each row as a line of JSON\n"
             "  --plot FILE            also draw a crossover plot (PNG): each algorithm's time relative to\n"
             "                         the fastest at each size, what automatic picked, and busbw; drawn\n"
             "                         by collectives-sim-plot.py (/usr/bin/python3, python3-matplotlib)\n",
             to);
}

// "RANK:FACTOR" (--slow-rank, --slow-link) into its two parts; false if it is not one.
bool rank_and_factor(const std::string& text, int& rank, double& factor) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  const auto r = perf::parse_int(text.substr(0, colon).c_str(), 0);
  char* end = nullptr;
  const double f = std::strtod(text.c_str() + colon + 1, &end);
  if (!r || end == text.c_str() + colon + 1 || *end != '\0' || !(f > 0)) return false;
  rank = *r;
  factor = f;
  return true;
}

// A string as JSON writes it, quoted (a cost file's name is part of the model's).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

// collectives-sim-plot.py: beside the installed program, else in the source tree that
// this one was built from (run from the build folder).
std::filesystem::path plot_script() {
  std::error_code ignored;
  const auto beside = std::filesystem::read_symlink("/proc/self/exe", ignored).parent_path() / "collectives-sim-plot.py";
  if (std::filesystem::exists(beside, ignored)) return beside;
  return std::filesystem::path(SIM_PLOT_SCRIPT_SOURCE_DIR) / "collectives-sim-plot.py";
}

// Runs the plot script on the JSON rows; says why when it cannot.
bool draw_plot(const std::string& rows, const std::string& png) {
  const char* python = "/usr/bin/python3";  // Debian's, which sees python3-matplotlib
  const std::string script = plot_script().string();
  if (::access(python, X_OK) != 0) {
    std::fprintf(stderr, "collectives-sim: --plot needs %s with python3-matplotlib (scripts/install-deps.sh installs them)\n",
                 python);
    return false;
  }
  if (::access(script.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "collectives-sim: --plot: cannot read %s\n", script.c_str());
    return false;
  }
  std::vector<std::string> words{python, script, rows, png};
  std::vector<char*> args;
  for (std::string& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  std::fflush(stdout);  // the script's messages after ours
  pid_t pid = 0;
  int status = 0;
  if (::posix_spawn(&pid, python, nullptr, nullptr, args.data(), environ) != 0 || ::waitpid(pid, &status, 0) != pid) {
    std::fprintf(stderr, "collectives-sim: --plot: cannot run %s\n", python);
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "collectives-sim: --plot: %s %s failed (status %d); no plot written\n", python, script.c_str(),
                 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help") {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const auto which = perf::collective_named(argv[1]);
  if (!which) {
    std::fprintf(stderr, "collectives-sim: %s is not a collective\n", argv[1]);
    return 2;
  }
  // Our own flags first; the rest are the perf programs'.
  sim_flags flags;
  std::vector<char*> rest{argv[0]};
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--ranks") flags.ranks = perf::parse_int(value(), 1).value_or(0);
    else if (a == "--ranks-per-host") flags.ranks_per_host = perf::parse_int(value(), 1).value_or(-1);
    else if (a == "--model") flags.model = value();
    else if (a == "--oversubscription") flags.oversubscription = std::atof(value());
    else if (a == "--hosts-per-leaf") flags.hosts_per_leaf = perf::parse_int(value(), 0).value_or(-2);
    else if (a == "--nic-per-host") flags.nic_per_host = true;
    else if (a == "--no-sharing") flags.no_sharing = true;
    else if (a == "--slow-rank") flags.slow_rank = value();
    else if (a == "--slow-link") flags.slow_link = value();
    else if (a == "--costs") flags.costs = value();
    else if (a == "--plot") flags.plot = value();
    else rest.push_back(argv[i]);
  }
  if (flags.ranks < 1 || flags.ranks_per_host < 0 || flags.hosts_per_leaf < -1 || (flags.model != "nvlink" && flags.model != "uniform")) {
    std::fputs("collectives-sim: --ranks, --ranks-per-host and --hosts-per-leaf take whole numbers, --model nvlink or uniform\n",
               stderr);
    return 2;
  }
  const perf::parse_result parsed = perf::parse_options(int(rest.size()), rest.data(), 1, perf::program::collectives);
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "collectives-sim: %s\n", parsed.error.c_str());
    return 2;
  }
  const perf::options& o = parsed.opts;
  if (o.in_place && *which != perf::collective::all_reduce && *which != perf::collective::reduce &&
      *which != perf::collective::broadcast) {
    std::fputs("collectives-sim: --in-place is simulated for all_reduce, reduce and broadcast only\n", stderr);
    return 2;
  }
  auto model = flags.model == "nvlink" ? coll::cluster_model::nvlink_hosts()
                                       : coll::cluster_model::uniform({.latency_s = 1e-6, .seconds_per_byte = 1.0 / 25e9}, 1.0 / 50e9);
  if (!flags.costs.empty()) {
    std::ifstream in(flags.costs);
    std::string transport;
    try {
      model = coll::cluster_model::measured(coll::detail::parse_cost_file(in, flags.costs, transport), flags.ranks);
      flags.model = flags.costs + " (" + transport + ")";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "collectives-sim: %s\n", e.what());
      return 2;
    }
  }
  if (flags.ranks_per_host > 0) model.ranks_per_host = flags.ranks_per_host;
  if (flags.oversubscription != 0) model.oversubscription = flags.oversubscription;
  if (flags.hosts_per_leaf >= 0) model.hosts_per_leaf = flags.hosts_per_leaf;
  if (flags.nic_per_host) model.nic_per_host = true;
  if (flags.oversubscription != 0 || flags.hosts_per_leaf >= 0 || flags.nic_per_host) model.shares_bandwidth = true;
  if (flags.no_sharing) model.shares_bandwidth = false;
  if ((!flags.slow_rank.empty() && !rank_and_factor(flags.slow_rank, model.slow_rank, model.slow_factor)) ||
      (!flags.slow_link.empty() && !rank_and_factor(flags.slow_link, model.slow_link_rank, model.slow_link_factor))) {
    std::fputs("collectives-sim: --slow-rank and --slow-link take RANK:FACTOR, e.g. 5:2\n", stderr);
    return 2;
  }
  try {
    model.check();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives-sim: %s\n", e.what());
    return 2;
  }
  std::vector<candidate> runs;
  for (const candidate& c : candidates(*which))
    if (o.algorithm == "auto" || o.algorithm == c.name ||
        (o.algorithm == "hierarchical" && std::string_view(c.name).starts_with("hierarchical")))
      runs.push_back(c);
  if (runs.empty()) {
    std::fprintf(stderr, "collectives-sim: --algo %s does not implement %s\n", o.algorithm.c_str(), argv[1]);
    return 2;
  }
  // A plot that could not be written says so now, not after the runs.
  if (!flags.plot.empty()) {
    const auto folder = std::filesystem::absolute(flags.plot).parent_path();
    if (::access(folder.c_str(), W_OK) != 0) {
      std::fprintf(stderr, "collectives-sim: cannot write %s (--plot)\n", flags.plot.c_str());
      return 2;
    }
  }
  // The plot is drawn from the JSON rows: in a file of our own where --json names none.
  std::string json_path = o.json_path;
  if (!flags.plot.empty() && json_path.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string name = std::string(tmp && *tmp ? tmp : "/tmp") + "/collectives-sim-XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd >= 0) {
      ::close(fd);
      json_path = name;
    }
  }
  std::FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  if ((!flags.plot.empty() || !o.json_path.empty()) && !json) {
    std::fprintf(stderr, "collectives-sim: cannot write %s\n", json_path.empty() ? "a temporary file" : json_path.c_str());
    return 2;
  }

  // The model in words, for the heading and each JSON row (the plot's title).
  const auto slower = [](const char* what, const std::string& rank_and_factor) {  // ", rank 5 2x slower"
    if (rank_and_factor.empty()) return std::string();
    const auto colon = rank_and_factor.find(':');
    return ", " + std::string(what) + rank_and_factor.substr(0, colon) + " " + rank_and_factor.substr(colon + 1) + "x slower";
  };
  const std::string model_words =
      flags.model + (model.shares_bandwidth ? ", shared" : ", unshared") + " bandwidth" +
      (model.leaves_block() ? ", leaves of " + std::to_string(model.hosts_per_leaf) + " hosts oversubscribed " +
                                  std::to_string(model.oversubscription).substr(0, 4) + ":1"
                            : "") +
      slower("rank ", flags.slow_rank) + slower("the link of rank ", flags.slow_link) + (o.in_place ? ", in place" : "");
  std::printf("# collectives-sim %s: %d ranks, %d per host, model %s\n", argv[1], flags.ranks, model.ranks_per_host,
              model_words.c_str());
  std::printf("# %12s %12s %6s %6s %6s %-30s %12s %8s %8s %12s %8s\n", "size", "count", "type", "redop", "root", "algorithm",
              "time(us)", "algbw", "busbw", "messages", "wall(s)");
  const double factor = perf::bus_bandwidth_factor(*which, flags.ranks);
  for (std::size_t bytes : perf::sizes_of(o)) {
    const std::size_t count = bytes / 4;
    const std::size_t per_call = perf::split_in_parts(*which) ? count / std::size_t(flags.ranks) : count;
    double fastest = 0, automatic = 0;
    std::string fastest_name, automatic_choice;
    for (const candidate& c : runs) {
      coll::sim_group cluster(flags.ranks, model, coll::sim_payload::sizes_only);
      const auto began = std::chrono::steady_clock::now();
      const auto r = c.run(cluster, {.count = per_call, .element_size = 4, .root = o.root, .in_place = o.in_place});
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      const double algbw = r.seconds > 0 ? double(bytes) / r.seconds / 1e9 : 0;
      std::printf("  %12zu %12zu %6s %6s %6d %-30s %12.2f %8.2f %8.2f %12llu %8.2f\n", bytes, count, "float",
                  perf::reduces(*which) ? "sum" : "none", perf::has_root(*which) ? o.root : -1,
                  std::string_view(c.name) == "automatic" ? ("automatic:" + std::string(r.algorithm)).c_str() : c.name,
                  r.seconds * 1e6, algbw, algbw * factor, static_cast<unsigned long long>(r.messages), wall);
      if (json)
        std::fprintf(json,
                     "{\"collective\":\"%s\",\"ranks\":%d,\"ranks_per_host\":%d,\"size\":%zu,\"algorithm\":\"%s\","
                     "\"planned_by\":\"%s\",\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"messages\":%llu,"
                     "\"events\":%llu,\"wall_s\":%.3f,\"model\":%s}\n",
                     argv[1], flags.ranks, model.ranks_per_host, bytes, c.name, r.algorithm, r.seconds * 1e6, algbw,
                     algbw * factor, static_cast<unsigned long long>(r.messages), static_cast<unsigned long long>(r.events), wall,
                     json_string(model_words).c_str());
      if (std::string_view(c.name) == "automatic") {
        automatic = r.seconds;
        automatic_choice = r.algorithm;
      } else if (fastest_name.empty() || r.seconds < fastest) {
        fastest = r.seconds;
        fastest_name = c.name;
      }
    }
    if (runs.size() > 2 && !fastest_name.empty())
      std::printf("#   %zu bytes: automatic picks %s (%.2f us); the fastest is %s (%.2f us): %.2fx\n", bytes,
                  automatic_choice.c_str(), automatic * 1e6, fastest_name.c_str(), fastest * 1e6, automatic / fastest);
  }
  if (json) std::fclose(json);
  if (flags.plot.empty()) return 0;
  const bool drawn = draw_plot(json_path, flags.plot);
  if (o.json_path.empty()) std::remove(json_path.c_str());
  if (drawn) std::printf("# plot: %s\n", flags.plot.c_str());
  return drawn ? 0 : 1;
}
