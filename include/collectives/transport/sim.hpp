// Simulated transport: every rank of a group lives in one process and one thread, and
// time is virtual. Messages cost what a model of a cluster says (cluster_model.hpp);
// the plans and the executor are the library's own. A group either carries data
// (results are real, for checking) or only sizes (no payload, for thousands of ranks:
// <collectives/simulation.hpp>).
//
//   coll::sim_group cluster(16, coll::cluster_model::nvlink_hosts());
//   std::vector<coll::communicator<coll::sim>> comms;
//   for (int r = 0; r < 16; ++r) comms.emplace_back(cluster.transport(r));
//   std::vector<coll::call_handle<coll::sim>> calls;
//   for (int r = 0; r < 16; ++r) calls.push_back(coll::iall_reduce(comms[r], data[r], coll::sum{}));
//   double seconds = cluster.run([&](int r) { return calls[r].test(); });
//
// A simulated rank never waits: its calls are started without waiting (the i-forms)
// and the group's run() steps them. A blocking call that would wait throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "detail/wire_transport.hpp"
#include "sim/cluster_model.hpp"
#include "sim/world.hpp"

namespace collectives {

class sim;

// Whether a simulated group moves the bytes of its messages.
enum class sim_payload {
  data,        // messages carry their bytes: results are the real ones
  sizes_only,  // messages carry their sizes only: for scale, with buffers that are never touched
};

// The ranks of one simulated cluster. Hand transport(r) to rank r's communicator, start
// each rank's calls, then run() them.
class sim_group {
 public:
  explicit sim_group(int size, cluster_model model = cluster_model::nvlink_hosts(), sim_payload payload = sim_payload::data)
      : world_(std::make_unique<sim_detail::world>(checked_size(size), model, payload == sim_payload::data)) {}

  int size() const noexcept { return world_->size(); }
  const cluster_model& model() const noexcept { return world_->model(); }
  bool carries_data() const noexcept { return world_->carries_data(); }
  inline sim transport(int rank);

  // The virtual time, which the calls' deadlines are counted in.
  deadline now() const noexcept { return world_->now_as_deadline(); }
  double seconds() const noexcept { return static_cast<double>(world_->now()) * 1e-12; }

  // Steps the ranks until `step(r)` has returned true for every rank r: it advances rank
  // r's calls without waiting (call_handle::test) and says whether they are all done.
  // Returns the virtual seconds the run took. Throws what a step throws; where ranks
  // wait for messages no rank will send, their calls time out at their deadlines.
  template <class Step>
  double run(Step&& step) {
    return run(std::forward<Step>(step), [](int, int) noexcept {});
  }
  // The same, with `warm(r, stage)` called ahead of step(r), to ask for the lines the
  // step will read (world::run): stage 0 first, then 1, then 2, nearer each time.
  template <class Step, class Warm>
  double run(Step&& step, Warm&& warm) {
    const sim_detail::picoseconds began = world_->now();
    world_->run([&](int r) -> bool { return step(r); }, [&](int r, int stage) noexcept { warm(r, stage); });
    return static_cast<double>(world_->now() - began) * 1e-12;
  }

  // The bytes of each rank's buffer in the calls about to run, and whether they are in
  // place, for a model whose cost of a byte depends on them (a measured one's memory
  // figure: sim_link::seconds_per_byte_at).
  void set_call_bytes(std::size_t bytes, bool in_place = false) noexcept { world_->set_call_bytes(bytes, in_place); }

  // Messages sent and events handled so far.
  std::uint64_t messages() const noexcept { return world_->messages(); }
  std::uint64_t events() const noexcept { return world_->events(); }

  // Wakes every rank's pending operations with errc::aborted.
  void abort(int by = -1) { world_->abort(by); }

 private:
  friend class sim;
  static int checked_size(int size) {
    if (size < 1) throw error(errc::invalid_group, "sim_group: a group needs at least one rank, got " + std::to_string(size));
    return size;
  }
  std::unique_ptr<sim_detail::world> world_;
};

// One rank of a simulated group.
class sim {
 public:
  static constexpr std::string_view selection_name = "sim";
  // A send is done once its bytes have left its port, whether or not the receive was
  // posted; every early message is kept; a cancelled send still arrives.
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = SIZE_MAX,
                                           .large_early_message_blocks_peer = false,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::link_goes_on,
                                           .reports_departed_peer = false,
                                           .ranks_can_be_processes = false,
                                           .one_host = false};

  using request = transport_detail::slot_request;

  sim(sim_group& group, int rank) : world_(group.world_.get()), rank_(rank) {
    if (rank < 0 || rank >= group.size())
      throw error(errc::invalid_peer, "sim: rank " + std::to_string(rank) + " is not in a group of " + std::to_string(group.size()));
  }

  int rank() const { return rank_; }
  int size() const { return world_->size(); }
  deadline now() const { return world_->now_as_deadline(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    return {world_->post_send(rank_, peer, tag, data)};
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return {world_->post_recv(rank_, peer, tag, into)}; }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t /*granule*/, chunk_sink sink) {
    return {world_->post_recv_reduce(rank_, peer, tag, bytes, sink)};
  }
  // A local step the executor has run costs this rank's core the model's time.
  std::optional<request> post_local_step(local_step step, std::size_t bytes) {
    const std::uint32_t slot = world_->post_local(rank_, step, bytes);
    if (slot == sim_detail::no_slot) return std::nullopt;
    return request{slot};
  }
  bool test(request& r) { return world_->test(rank_, r.slot); }
  void cancel(request& r) noexcept { world_->cancel(rank_, r.slot); }
  void watch(request& r, std::vector<std::uint32_t>* list, std::uint32_t key) noexcept { world_->watch(rank_, r.slot, list, key); }
  // Asks for the line a test of `r` reads, ahead of it.
  void prefetch(const request& r) const noexcept { world_->prefetch_op(rank_, r.slot); }
  void abort() { world_->abort(rank_); }

  // Never waits: the group's run() moves the clock. True if something of this rank's
  // finished since it last asked.
  bool wait_for_activity(deadline until) {
    if (world_->take_news(rank_)) return true;
    if (until <= now() || world_->aborted()) return false;
    throw error(errc::invalid_config, "rank " + std::to_string(rank_) +
                                          ": a simulated rank cannot wait: start its calls without waiting (iall_reduce, ...) "
                                          "and step them with sim_group::run");
  }

  // Each rank's host, by the model.
  std::vector<int> hosts() const {
    std::vector<int> h(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) h[std::size_t(r)] = world_->model().host_of(r);
    return h;
  }
  // The figures of the model, for the algorithms' choices: those across hosts where the
  // group spans hosts.
  link_costs current_costs() const {
    const cluster_model& m = world_->model();
    return m.costs(size() > m.ranks_per_host ? m.across_hosts : m.on_host);
  }
  link_classes known_link_classes() const {
    const cluster_model& m = world_->model();
    return {m.costs(m.on_host), m.costs(m.across_hosts)};
  }

 private:
  sim_detail::world* world_;
  int rank_;
};

inline sim sim_group::transport(int rank) { return sim(*this, rank); }

}  // namespace collectives
