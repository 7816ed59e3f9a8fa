// The link costs automatic picks by, for each class of link (two ranks of one host;
// two on different hosts): the transport's own figures; or, with COLLECTIVES_TUNE=1,
// measured by a short ring shift among the ranks of each host and among the ranks
// with the same place on every host, at the communicator's first call that chooses; or
// read from the file COLLECTIVES_TUNE_FILE names, which a tuned run saved. Rank 0
// measures or reads and sends the figures to the others, so every rank chooses alike.
// docs/tuning.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../algorithm/direct.hpp"
#include "../communicator.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../runtime/executor_core.hpp"
#include "../settings.hpp"
#include "call_check.hpp"
#include "cost_file.hpp"
#include "exchange.hpp"
#include "hosts.hpp"

namespace collectives::detail {

template <class Tr>
std::string transport_name_of(const Tr& t) {
  if constexpr (requires { t.base().name(); }) return std::string(t.base().name());
  else if constexpr (requires { t.name(); }) return std::string(t.name());
  else if constexpr (requires { Tr::selection_name; }) return std::string(Tr::selection_name);
  else return "unnamed";
}

// What rank 0 sends the others: the figures, how it got them, and its error if any.
struct shared_costs {
  link_classes classes;
  int source = 0;  // 0: the transport's figures, 1: measured, 2: read from the file, -1: rank 0 failed
  char failure[240] = {};
};

// Runs one schedule of byte messages on this rank as call `number` and returns its seconds.
template <transport Tr>
double timed_run(communicator<Tr>& comm, const schedule& plan, const std::vector<std::byte>& out, std::vector<std::byte>& in,
                 const char* call, std::uint64_t number, executor_workspace<typename Tr::request>& room) {
  const auto start = std::chrono::steady_clock::now();
  exchange(comm, plan, out.data(), in.data(), 1, call_context::starting_at(comm.now(), call, number, comm.timeout()), room);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `rounds` steps of a ring shift: each rank sends `bytes` to the next and receives
// from the previous, a step starting when the one before has arrived, as the steps
// of a collective do. `burst` messages of each step at once (one, for the latency and
// the bandwidth; several, for the cost of each extra one). `marching_through` bytes:
// each step's message at the next place of buffers that long (from their start again
// once through), as a large call's slices move through its buffers, rather than all
// at the start; 0: all at the start.
COLLECTIVES_DECL schedule ring_steps(int next, int previous, std::size_t bytes, int rounds, int burst = 1,
                                     std::size_t marching_through = 0);

// Runs (so call numbers) of one class's measurement: seven timings, each a warm-up and five.
inline constexpr int runs_per_figure = 5, timings_per_link = 7, calls_per_link = timings_per_link * (1 + runs_per_figure);


// The ring shift among `members` (ranks of this communicator, this one among them),
// as the calls numbered from `number`: the figures of one class of link as this rank
// saw them, every member sending and receiving at once. Medians of a few runs each,
// after one to warm the links up.
template <transport Tr>
link_costs measure_links(communicator<Tr>& comm, const std::vector<int>& members, const char* call, std::uint64_t number) {
  const auto me = std::size_t(std::find(members.begin(), members.end(), comm.rank()) - members.begin());
  const int next = members[(me + 1) % members.size()], previous = members[(me + members.size() - 1) % members.size()];
  // The per-byte figure from messages of a pipeline's slice, the size ring and tree
  // send a large call in: a larger one outruns what a transport buffers (shm's FIFO
  // holds 512 KiB) and measures its flow control, which the calls' messages never meet.
  const std::size_t large = plan_request{}.slice_bytes;
  constexpr int small_rounds = 20, large_rounds = 6, burst = 8, burst_rounds = 5, runs = runs_per_figure;
  const int memory_rounds = static_cast<int>(link_costs::memory_figure_bytes / large),
            middle_rounds = 4 * static_cast<int>(link_costs::middle_figure_bytes / large);
  std::vector<std::byte> out(link_costs::memory_figure_bytes, std::byte{1}), in(link_costs::memory_figure_bytes);
  executor_workspace<typename Tr::request> room;
  const auto median_of = [&](const schedule& plan) {
    timed_run(comm, plan, out, in, call, number++, room);
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) t.push_back(timed_run(comm, plan, out, in, call, number++, room));
    std::nth_element(t.begin(), t.begin() + runs / 2, t.end());
    return t[runs / 2];
  };
  // A small step's time is the difference between runs of 2R and R steps, over R: a
  // run's own start (its plan, the ranks starting apart) is as long as several steps.
  // Where noise leaves no difference, the R steps' run over R.
  const auto small_step = [&](int rounds, int messages) {
    const double twice = median_of(ring_steps(next, previous, 8, 2 * rounds, messages));
    const double once = median_of(ring_steps(next, previous, 8, rounds, messages));
    return (twice > once ? twice - once : once) / rounds;
  };
  const double step = small_step(small_rounds, 1);
  const double large_step = median_of(ring_steps(next, previous, large, large_rounds)) / large_rounds;
  const double burst_step = small_step(burst_rounds, burst);
  const double memory_step =
      median_of(ring_steps(next, previous, large, memory_rounds, 1, link_costs::memory_figure_bytes)) / memory_rounds;
  const double middle_step =
      median_of(ring_steps(next, previous, large, middle_rounds, 1, link_costs::middle_figure_bytes)) / middle_rounds;
  link_costs c;
  c.per_message_s = std::max(0.0, (burst_step - step) / (burst - 1));
  c.latency_s = std::max(step - c.per_message_s, step / 10);  // a step costs latency + per message
  c.seconds_per_byte = std::max(1e-13, (large_step - step) / double(large));
  c.memory_seconds_per_byte = std::max(1e-13, (memory_step - step) / double(large));
  c.middle_seconds_per_byte = std::max(1e-13, (middle_step - step) / double(large));
  return c;
}

// Seconds per byte of a float sum on this core (the reduction most calls make), and of
// a copy, within the caches.
COLLECTIVES_DECL double measure_reduction();
COLLECTIVES_DECL double measure_copy();

// The figures as COLLECTIVES_TUNE and COLLECTIVES_TUNE_FILE ask, rank 0's to be sent
// to all: every rank takes part in the measurement.
template <transport Tr>
shared_costs find_costs(communicator<Tr>& comm, const char* call) {
  shared_costs found;
  found.classes = {costs_of(comm.transport()), costs_of(comm.transport())};
  const auto file = settings::text("COLLECTIVES_TUNE_FILE");
  const std::string transport = transport_name_of(comm.transport());
  if (settings::flag("COLLECTIVES_TUNE").value_or(false)) {
    const std::span<const int> hosts = hosts_of(comm, call);
    // The classes' groups: this rank's host, and the ranks with its place on every host.
    std::vector<int> on_host, across;
    for (int q = 0; q < comm.size(); ++q)
      if (hosts[std::size_t(q)] == hosts[std::size_t(comm.rank())]) on_host.push_back(q);
    const auto place = std::find(on_host.begin(), on_host.end(), comm.rank()) - on_host.begin();
    std::vector<int> seen;  // ranks met so far on each host
    for (int q = 0; q < comm.size(); ++q) {
      const auto h = std::size_t(hosts[std::size_t(q)]);
      if (h >= seen.size()) seen.resize(h + 1, 0);
      if (seen[h]++ == place) across.push_back(q);
    }
    // Every rank takes the measurement's call numbers, to keep counting calls alike.
    const std::uint64_t numbers = comm.next_call();
    for (int i = 1; i < 2 * calls_per_link; ++i) comm.next_call();
    // Across hosts first, where every rank starts at once after the hosts' exchange: so
    // each host's ranks share its network port alike, as a collective's do.
    if (across.size() > 1) found.classes.across_hosts = measure_links(comm, across, call, numbers + calls_per_link);
    if (on_host.size() > 1) found.classes.on_host = measure_links(comm, on_host, call, numbers);
    // Rank 0's figures go to all; whether its classes were measured is the same question.
    const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](int h) { return h == hosts[0]; });
    const bool alone_on_host0 = std::count(hosts.begin(), hosts.end(), hosts[0]) == 1;
    if (comm.rank() != 0) return found;
    found.source = 1;
    const double reduction = measure_reduction();
    found.classes.on_host.reduce_seconds_per_byte = found.classes.across_hosts.reduce_seconds_per_byte = reduction;
    found.classes.on_host.copy_seconds_per_byte = found.classes.across_hosts.copy_seconds_per_byte = measure_copy();
    if (one_host) found.classes.across_hosts = found.classes.on_host;  // no call crosses
    if (alone_on_host0) found.classes.on_host = found.classes.across_hosts;  // no call of rank 0's stays
    const std::string how = "measured by COLLECTIVES_TUNE=1 over " + transport + " at " + std::to_string(comm.size()) +
                            " ranks" + (one_host ? ", on one host" : "") + (alone_on_host0 ? ", alone on its host" : "");
    if (log::enabled(log::level::info))
      log::info("rank 0: link costs " + how + ": on one host " + describe_costs(found.classes.on_host) +
                "; across hosts " + (one_host ? "(none)" : describe_costs(found.classes.across_hosts)));
    if (file) {
      std::ofstream saved(*file);
      saved << cost_file_text(found.classes, transport, how);
      if (saved.flush()) log::info("rank 0: link costs saved to " + *file);
      else log::warn("COLLECTIVES_TUNE_FILE " + *file + " cannot be written: " + std::strerror(errno) + "; the costs were not saved");
    }
    return found;
  }
  if (!file || comm.rank() != 0) return found;
  try {
    std::ifstream in(*file);
    if (!in) throw error(errc::invalid_config, "COLLECTIVES_TUNE_FILE " + *file + " cannot be read: " + std::strerror(errno));
    std::string saved_over;
    const link_classes read = parse_cost_file(in, *file, saved_over);
    if (saved_over != transport) {
      log::warn("COLLECTIVES_TUNE_FILE " + *file + " was measured over " + saved_over + ", this communicator runs over " +
                transport + ": automatic picks by " + transport + "'s own figures");
      return found;
    }
    found.classes = read;
    found.source = 2;
    if (log::enabled(log::level::info))
      log::info("rank 0: link costs read from " + *file + ": on one host " + describe_costs(read.on_host) +
                "; across hosts " + describe_costs(read.across_hosts));
  } catch (const error& e) {
    found.source = -1;
    std::snprintf(found.failure, sizeof found.failure, "%s", e.what());
  }
  return found;
}

// The figures this communicator's choosing calls use; every rank calls this at the
// same point (inside the same collective call). Kept by the communicator.
template <transport Tr>
const link_classes& link_classes_of(communicator<Tr>& comm, const char* call) {
  auto& known = comm.link_figures();
  if (known) return *known;
  // A transport that knows its classes of link (a simulated cluster's model) says them.
  if constexpr (requires { { comm.transport().known_link_classes() } -> std::same_as<link_classes>; })
    return known.emplace(comm.transport().known_link_classes());
  const bool asked = settings::flag("COLLECTIVES_TUNE").value_or(false) || settings::text("COLLECTIVES_TUNE_FILE");
  if (!asked || comm.size() == 1) return known.emplace(link_classes{costs_of(comm.transport()), costs_of(comm.transport())});
  const shared_costs mine = find_costs(comm, call);
  shared_costs agreed;
  const schedule plan = direct::plan(kind::broadcast{}, {.rank = comm.rank(), .size = comm.size(), .count = sizeof(shared_costs)});
  exchange(comm, plan, &mine, &agreed, 1, call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout()));
  if (agreed.source < 0)
    throw error(errc::invalid_config, std::string(agreed.failure) + (comm.rank() == 0 ? "" : " (read by rank 0)"));
  return known.emplace(agreed.classes);
}

}  // namespace collectives::detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "measured_costs.ipp"
#endif
