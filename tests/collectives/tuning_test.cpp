// The link costs automatic picks by, measured (COLLECTIVES_TUNE=1), saved and read
// back (COLLECTIVES_TUNE_FILE): every rank takes rank 0's figures, automatic's calls
// still give the serial result (hierarchical among its choices), the call numbers
// stay in step, and a bad file is every rank's clear error, soon, after which the
// communicator goes on.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <collectives/split.hpp>

#include "harness.hpp"

using namespace testing;

namespace {

// Sets (or with nullptr unsets) an environment variable while it lives. Made and
// dropped outside the ranks' threads.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~scoped_env() { saved_ ? ::setenv(name_, saved_->c_str(), 1) : ::unsetenv(name_); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// Only rank 0 reads and writes the file: each process may name its own.
std::string cost_file() { return "/tmp/collectives-tune-" + std::to_string(::getpid()) + ".txt"; }

// A group with nothing settled yet: the costs are settled by its first choosing call.
template <class C>
auto fresh_group(C& c) {
  auto g = c.split(0, c.rank());
  g->link_figures().reset();
  return g;
}

// automatic's all_reduce against the serial reduction, at sizes each algorithm wins.
template <class T, class Op, class C>
std::string check_automatic(C& g, int p) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1001), std::size_t(70001)}) {
    std::vector<T> v = inputs<T, Op>(g.rank(), n);
    coll::all_reduce(g, v, Op{});
    const auto want = reduced<T, Op>(all_inputs<T, Op>(p, n));
    if (auto m = mismatch<T>(v, want, "n=" + std::to_string(n)); !m.empty()) return m;
  }
  return {};
}

std::vector<double> figures_of(const coll::link_classes& c) {
  std::vector<double> out;
  for (const coll::link_costs* l : {&c.on_host, &c.across_hosts})
    out.insert(out.end(), {l->latency_s, l->per_message_s, l->seconds_per_byte, l->reduce_seconds_per_byte});
  return out;
}

// Empty when every rank holds rank 0's figures, each finite, > 0 but the cost of an
// extra message (a burst may take no longer than one message each way).
template <class C>
std::string same_figures_everywhere(C& g) {
  if (!g.link_figures()) return "no figures after a choosing call";
  const std::vector<double> mine = figures_of(*g.link_figures());
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (!std::isfinite(mine[i]) || mine[i] < 0 || (mine[i] == 0 && i % 4 != 1)) return "figure " + std::to_string(i) + " is " + std::to_string(mine[i]);
  std::vector<double> first = mine;
  coll::broadcast<coll::direct>(g, first, 0);
  return mine == first ? "" : "this rank's figures differ from rank 0's";
}

}  // namespace

TEST_CASE("COLLECTIVES_TUNE=1: every rank takes rank 0's measured figures, and automatic's results are the serial ones") {
  scoped_env tune("COLLECTIVES_TUNE", "1"), file("COLLECTIVES_TUNE_FILE", nullptr);
  for (int p : rank_counts) {
    INFO(p, " ranks");
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = fresh_group(c);
      if (auto m = check_automatic<std::int64_t, coll::sum>(*g, p); !m.empty()) return "sum: " + m;
      if (auto m = check_automatic<mat2, mat_mul>(*g, p); !m.empty()) return "mat_mul: " + m;  // keeps rank order
      if (p > 1) {
        const auto& f = *g->link_figures();
        if (!coll::same_figures(f.on_host, f.across_hosts)) return "one host, yet the classes differ";
        if (coll::same_figures(f.on_host, coll::costs_of(g->transport()))) return "the transport's figures, not measured ones";
      }
      return same_figures_everywhere(*g);
    });
  }
}

TEST_CASE("COLLECTIVES_TUNE=1 with two declared hosts: both classes measured, automatic's results exact") {
  scoped_env tune("COLLECTIVES_TUNE", "1"), file("COLLECTIVES_TUNE_FILE", nullptr);
  for (int p : rank_counts) {
    if (p < 4) continue;
    INFO(p, " ranks");
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = fresh_group(c);
      g->hosts().clear();
      for (int q = 0; q < p; ++q) g->hosts().push_back(q * 2 / p);  // two hosts of P/2 ranks (P even)
      if (auto m = check_automatic<std::int64_t, coll::sum>(*g, p); !m.empty()) return "sum: " + m;
      if (auto m = check_automatic<double, coll::avg>(*g, p); !m.empty()) return "avg: " + m;
      if (coll::same_figures(g->link_figures()->on_host, g->link_figures()->across_hosts)) return "one class measured";
      return same_figures_everywhere(*g);
    });
  }
}

TEST_CASE("automatic runs hierarchical where the figures say the hosts' link is slow, and its results are the serial ones") {
  scoped_env tune("COLLECTIVES_TUNE", nullptr), file("COLLECTIVES_TUNE_FILE", nullptr);
  const coll::link_costs fast{.latency_s = 2e-6, .per_message_s = 0.5e-6, .seconds_per_byte = 1 / 10e9},
      slow{.latency_s = 30e-6, .per_message_s = 4e-6, .seconds_per_byte = 1 / 0.1e9};
  for (int p : rank_counts) {
    if (p < 4 || p % 2) continue;
    INFO(p, " ranks");
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = fresh_group(c);
      g->hosts().clear();
      for (int q = 0; q < p; ++q) g->hosts().push_back(q * 2 / p);  // two hosts of P/2 ranks
      g->link_figures() = coll::link_classes{fast, slow};
      for (std::size_t n : {std::size_t(70001), std::size_t(1) << 20}) {  // one piece, two
        // The choice the call makes, asked of automatic with the call's request.
        const coll::plan_request r{.rank = g->rank(), .size = p, .count = n, .element_size = sizeof(std::int64_t),
                                   .costs = slow, .on_host_costs = fast, .hosts = g->hosts()};
        if (std::string_view(coll::automatic::chosen_name(coll::kind::all_reduce{}, r)) != coll::hierarchical<>::name)
          return "automatic would not pick hierarchical at n=" + std::to_string(n);
        std::vector<std::int64_t> v = inputs<std::int64_t, coll::sum>(g->rank(), n);
        coll::all_reduce(*g, v, coll::sum{});
        const auto want = reduced<std::int64_t, coll::sum>(all_inputs<std::int64_t, coll::sum>(p, n));
        if (auto m = mismatch<std::int64_t>(v, want, "n=" + std::to_string(n)); !m.empty()) return m;
      }
      return {};
    });
  }
}

TEST_CASE("COLLECTIVES_TUNE_FILE: the figures a tuned run saved are read back alike on every rank") {
  const std::string path = cost_file();
  for (int p : rank_counts) {
    if (p < 2) continue;
    INFO(p, " ranks");
    std::vector<std::vector<double>> saved(static_cast<std::size_t>(p));  // each process fills its own rank's
    {
      scoped_env tune("COLLECTIVES_TUNE", "1"), file("COLLECTIVES_TUNE_FILE", path.c_str());
      on_ranks(p, [&](comm& c) -> std::string {
        auto g = fresh_group(c);
        if (auto m = check_automatic<std::int64_t, coll::sum>(*g, p); !m.empty()) return m;
        saved[std::size_t(c.rank())] = figures_of(*g->link_figures());
        return {};
      });
    }
    scoped_env tune("COLLECTIVES_TUNE", nullptr), file("COLLECTIVES_TUNE_FILE", path.c_str());
    on_ranks(p, [&](comm& c) -> std::string {
      auto g = fresh_group(c);
      if (auto m = check_automatic<std::int64_t, coll::sum>(*g, p); !m.empty()) return m;
      const std::vector<double> read = figures_of(*g->link_figures()), &want = saved[std::size_t(c.rank())];
      for (std::size_t i = 0; i < read.size(); ++i)
        if (std::abs(read[i] - want[i]) > 1e-5 * want[i])  // the file keeps 6 digits
          return "figure " + std::to_string(i) + " read back as " + std::to_string(read[i]) + ", saved " + std::to_string(want[i]);
      return same_figures_everywhere(*g);
    });
  }
  std::remove(path.c_str());
}

TEST_CASE("COLLECTIVES_TUNE_FILE: a bad file is every rank's clear error at once, and the communicator goes on") {
  const std::string path = cost_file();
  std::ofstream(path) << "transport x\non_host.latency_s -1\n";
  for (int p : rank_counts) {
    if (p < 2) continue;
    INFO(p, " ranks");
    {
      scoped_env tune("COLLECTIVES_TUNE", nullptr), file("COLLECTIVES_TUNE_FILE", path.c_str());
      on_ranks(p, [&](comm& c) -> std::string {
        auto g = fresh_group(c);
        std::vector<int> v(5, 1);
        const auto start = std::chrono::steady_clock::now();
        try {
          coll::all_reduce(*g, v, coll::sum{});
          return "a bad cost file was taken";
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::invalid_config) return std::string("not invalid_config: ") + e.what();
          if (std::string(e.what()).find("line 2: on_host.latency_s must be a number >= 0, not -1") == std::string::npos)
            return std::string("unclear: ") + e.what();
        }
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) return "the error came late";
        g->link_figures() = coll::link_classes{};  // the user's own figures: the file is not read again
        coll::all_reduce(*g, v, coll::sum{});
        return v[0] == p ? "" : "the sum after the error is " + std::to_string(v[0]);
      });
    }
  }
  std::remove(path.c_str());
}
