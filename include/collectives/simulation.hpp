// One collective on every rank of a simulated cluster, sizes only: the algorithm's
// plans, run by the executor over the simulated transport (transport/sim.hpp), with
// buffers that are never touched, so that thousands of ranks fit in one process.
//
//   coll::sim_group cluster(8192, coll::cluster_model::nvlink_hosts(), coll::sim_payload::sizes_only);
//   auto r = coll::simulate<coll::ring>(cluster, coll::kind::all_reduce{}, {.count = 16 << 20});
//   // r.seconds: the call's virtual time, from the first rank's start to the last one's end
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "concepts/algorithm.hpp"
#include "detail/call.hpp"
#include "runtime/compact_plan.hpp"
#include "runtime/executor_core.hpp"
#include "transport/sim.hpp"

namespace collectives {

struct simulation_request {
  std::size_t count = 0;         // elements per rank, as the collective's call counts them
  std::size_t element_size = 4;  // bytes per element
  int root = 0;                  // broadcast, reduce, gather, scatter
  std::size_t slice_bytes = plan_request{}.slice_bytes;  // the pipeline's slices (ring, tree)
  // The output is the input (all_reduce, reduce and broadcast, whose in-place form is
  // that): a model that charges copies charges none of it onto itself.
  bool in_place = false;
};

struct simulation_result {
  double seconds = 0;           // virtual time from the start to the last rank's end
  std::uint64_t messages = 0;   // sent by all ranks
  std::uint64_t events = 0;     // the simulator handled
  std::size_t distinct_plans = 0;  // plans the ranks' plans compacted to (1: every rank runs the same)
  const char* algorithm = "";   // what planned it (automatic names its choice)
};

namespace detail {

// The element work of a call whose buffers are never touched: each step is free (the
// transport charges what it costs). The buffers are addresses never read, the input's,
// the output's and scratch's far apart, so that no region of one meets another's.
class untouched_elements final : public element_work {
 public:
  explicit untouched_elements(std::size_t bytes_each) noexcept : element_work(bytes_each, false, false) {}
  void copy(std::byte*, const std::byte*, std::size_t) override {}
  void combine(std::byte*, const std::byte*, std::size_t, operand_order) override {}
  void finalize(std::byte*, std::size_t, int) override {}
  std::byte* memory(room which, std::size_t, reusable_host_memory&) override {
    return address(which == room::scratch ? buffer_id::scratch : buffer_id::staging);
  }
  void synchronize(deadline) override {}
  chunk_sink::consume_function fused_reduce() const noexcept override {
    return [](void*, std::size_t, std::span<const std::byte>) {};
  }
  void* op_address() noexcept override { return nullptr; }
  static_assert(sizeof(std::uintptr_t) >= 8, "sizes-only simulation keeps its buffers terabytes apart");
  static std::byte* address(buffer_id b) noexcept {
    return reinterpret_cast<std::byte*>((std::uintptr_t(1) + static_cast<std::uintptr_t>(b)) << 44);
  }
};

}  // namespace detail

// Runs Kind planned by Algorithm on every rank of `cluster` (made with
// sim_payload::sizes_only) and returns its virtual time.
template <algorithm Algorithm, class Kind>
  requires implements<Algorithm, Kind>
simulation_result simulate(sim_group& cluster, Kind kind, const simulation_request& what) {
  if (cluster.carries_data())
    throw error(errc::invalid_config, "simulate: the cluster must be made with sim_payload::sizes_only");
  constexpr bool input_is_output_in_place =
      std::is_same_v<Kind, kind::all_reduce> || std::is_same_v<Kind, kind::reduce> || std::is_same_v<Kind, kind::broadcast>;
  if (what.in_place && !input_is_output_in_place)
    throw error(errc::invalid_config, "simulate: in_place is simulated for all_reduce, reduce and broadcast only");
  const int size = cluster.size();
  const cluster_model& model = cluster.model();
  std::vector<int> hosts(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) hosts[std::size_t(r)] = model.host_of(r);

  // What stepping a rank reads most comes first, side by side.
  struct rank_run {
    explicit rank_run(sim t) : transport(t) {}
    sim transport;
    executor_workspace<sim::request> room;
    std::optional<executor_core<sim>> core;
    std::shared_ptr<const compact_plan> plan;
  };
  detail::untouched_elements work(what.element_size);
  std::vector<std::unique_ptr<rank_run>> ranks;
  ranks.reserve(std::size_t(size));
  simulation_result result;
  std::vector<const compact_plan*> distinct;
  // Each rank's plan, or rank 0's for all where the plans turn with the rank.
  bool one_for_all = false;
  for (int r = 0; r < size; ++r) {
    auto& run = *ranks.emplace_back(std::make_unique<rank_run>(cluster.transport(r)));
    plan_request req{.rank = r, .size = size, .count = what.count, .root = what.root, .element_size = what.element_size,
                     .costs = run.transport.current_costs(), .on_host_costs = model.costs(model.on_host),
                     .slice_bytes = what.slice_bytes};
    if constexpr (plans_by_hosts<Algorithm, Kind>) req.hosts = hosts;
    if (r == 0) one_for_all = turns_with_rank<Algorithm>(kind, req);
    if (one_for_all && r > 0) {
      run.plan = ranks[0]->plan;
      continue;
    }
    schedule planned = plan_of<Algorithm>(kind, req);
    result.algorithm = planned.algorithm;
    run.plan = shared_plan(compact_plan(planned, r, size, detail::blocks_by_rank_in<Kind>, true));
    if (distinct.empty() || distinct.back() != run.plan.get()) distinct.push_back(run.plan.get());
  }
  std::sort(distinct.begin(), distinct.end());
  result.distinct_plans = static_cast<std::size_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());

  cluster.set_call_bytes(what.count * what.element_size, what.in_place);
  const auto began_messages = cluster.messages(), began_events = cluster.events();
  const call_context ctx = call_context::starting_at(cluster.now(), "simulate", 1, std::chrono::hours(24 * 365));
  for (auto& run : ranks) {
    run->core.emplace(*run->plan, run->transport, detail::untouched_elements::address(buffer_id::input),
                      detail::untouched_elements::address(what.in_place ? buffer_id::input : buffer_id::output), work,
                      run->room);
    run->core->start();
  }
  // Thousands of ranks are stepped in turn, each one's state cold by its next turn: the
  // lines a step reads are asked for a few ranks ahead (sim_group::run's `warm`).
  const auto warm = [&](int r, int stage) noexcept {
    const rank_run& run = *ranks[std::size_t(r)];
    if (stage > 0) return run.core->prefetch(stage);
    const char* const from = reinterpret_cast<const char*>(&run);
    const char* const to = reinterpret_cast<const char*>(&run.core) + 128;  // the core's own bookkeeping first
    for (const char* p = from; p < to; p += 64) detail::prefetch(p);
  };
  result.seconds = cluster.run([&](int r) { return ranks[std::size_t(r)]->core->advance(ctx); }, warm);
  result.messages = cluster.messages() - began_messages;
  result.events = cluster.events() - began_events;
  return result;
}

}  // namespace collectives
