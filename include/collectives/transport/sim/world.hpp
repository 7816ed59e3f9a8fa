// The state of a simulated group (transport/sim.hpp): the virtual clock, the events
// still to come, each rank's posted operations, early messages and ports. Everything
// runs on one thread: the driver (world::run) steps the ranks that have news, then
// moves the clock to the next event.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../../concepts/vocabulary.hpp"
#include "../../error.hpp"
#include "../../runtime/prefetch.hpp"
#include "cluster_model.hpp"
#include "events.hpp"
#include "flows.hpp"
#include "match_table.hpp"

namespace collectives::sim_detail {

enum class op_kind : std::uint8_t { send, recv, recv_reduce, local };  // local: a step of the rank's core
enum class op_state : std::uint8_t { unused, posted, done, failed };

// One cache line: the driver touches thousands of ranks' ops in turn, each once or twice.
struct alignas(64) op {
  op_kind kind = op_kind::send;
  op_state state = op_state::unused;
  std::uint32_t generation = 0;  // events of an op cancelled since carry an older one
  int peer = -1;
  std::uint32_t next = no_slot;  // the next receive posted for the same (peer, tag)
  std::uint64_t call = 0;        // the tag's fields, without its padding
  std::uint32_t step = 0;
  std::uint32_t key = 0;
  std::size_t bytes = 0;
  std::vector<std::uint32_t>* watcher = nullptr;  // told `key` once the op finishes (lists_finished_requests)
  void* destination = nullptr;  // recv: its buffer; recv_reduce: its sink's context
  chunk_sink::consume_function consume = nullptr;  // recv_reduce: its sink
  message_tag tag() const noexcept { return {call, step}; }
  chunk_sink sink() const noexcept { return {destination, consume}; }
};
static_assert(sizeof(op) == 64);

struct message {
  int source = -1;
  message_tag tag{};
  std::size_t bytes = 0;
  std::vector<std::byte> payload;  // data mode: the bytes as sent
  std::uint32_t next = no_slot;    // the next early message with the same (peer, tag)
  picoseconds first_byte_at = 0;   // when its first byte reaches the receiver
};

enum class link_class : std::uint8_t { on_host, across_hosts };

// Two lines read for most events and steps, then one seldom read.
struct alignas(64) rank_state {
  std::vector<op> ops;
  std::uint32_t unused = no_slot;  // the op let go of last, whose `next` is the one before (a list)
  bool news = false;    // something finished since the rank last looked
  bool queued = false;  // in the driver's list of ranks to step
  picoseconds posting_until = 0;  // with shared bandwidth: messages' own costs, one at a time
  picoseconds reducing_until = 0;  // the core is busy until then (reductions, local steps)
  picoseconds sending_until[2]{};  // by link_class
  match_table queues;  // posted receives not matched (slots), or early messages
  picoseconds receiving_until[2]{};
  std::vector<std::pair<std::uint32_t, error>> failures;  // by slot: why a failed op failed (seldom any)
  std::vector<picoseconds> posted_at;  // by slot: when a fused receive was posted (reduces_as_bytes_arrive only)
};

class world {
 public:
  world(int size, cluster_model model, bool carries_data)
      : model_(model), carries_data_(carries_data), ranks_(static_cast<std::size_t>(size)) {
    model_.check();
    if (model_.shares_bandwidth) add_links();
  }
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  int size() const noexcept { return static_cast<int>(ranks_.size()); }
  const cluster_model& model() const noexcept { return model_; }
  bool carries_data() const noexcept { return carries_data_; }
  picoseconds now() const noexcept { return now_; }
  // The virtual time as the calls' deadlines count it.
  deadline now_as_deadline() const noexcept { return deadline{} + std::chrono::nanoseconds(now_ / 1000); }
  std::uint64_t messages() const noexcept { return messages_; }

  // Without shared bandwidth, the bytes of the calls about to run, per rank: where a
  // link has a memory figure, what a byte costs depends on it (sim_link::seconds_per_byte_at;
  // an in-place call streams through half the bytes of one with an output of its own).
  // The core's local steps are as much dearer as the on-host link's bytes.
  void set_call_bytes(std::size_t call_bytes, bool in_place = false) noexcept {
    const std::size_t bytes = in_place ? call_bytes / 2 : call_bytes;
    seconds_per_byte_[int(link_class::on_host)] = model_.on_host.seconds_per_byte_at(bytes);
    seconds_per_byte_[int(link_class::across_hosts)] = model_.across_hosts.seconds_per_byte_at(bytes);
    local_step_factor_ = model_.on_host.memory_factor_at(bytes);
  }
  std::uint64_t events() const noexcept { return events_handled_; }

  std::uint32_t post_send(int rank, int peer, message_tag tag, std::span<const std::byte> data) {
    check_peer(rank, peer);
    const std::uint32_t slot = make_op(rank, op_kind::send, peer, tag, data.size());
    const std::uint32_t m = make_message(rank, tag, data);
    const link_class via = model_.same_host(rank, peer) ? link_class::on_host : link_class::across_hosts;
    if (model_.shares_bandwidth) send_as_flow(rank, slot, peer, m, via, data.size());
    else send_through_ports(rank, slot, peer, m, via, data.size());
    ++messages_;
    return slot;
  }

  std::uint32_t post_recv(int rank, int peer, message_tag tag, std::span<std::byte> into) {
    const std::uint32_t slot = post_receive(rank, op_kind::recv, peer, tag, into.size());
    at(rank).ops[slot].destination = into.data();
    return match_posted(rank, slot);
  }

  std::uint32_t post_recv_reduce(int rank, int peer, message_tag tag, std::size_t bytes, chunk_sink sink) {
    const std::uint32_t slot = post_receive(rank, op_kind::recv_reduce, peer, tag, bytes);
    rank_state& r = at(rank);
    op& o = r.ops[slot];
    o.destination = sink.context;
    o.consume = sink.consume;
    if (model_.reduces_as_bytes_arrive) {  // it reduces no byte before it is posted
      if (r.posted_at.size() <= slot) r.posted_at.resize(slot + 1);
      r.posted_at[slot] = now_;
    }
    return match_posted(rank, slot);
  }

  // A local step of `bytes` that rank's core has run: done once the core, which does
  // one thing at a time, has spent what the model says it costs. no_slot where it
  // costs nothing.
  std::uint32_t post_local(int rank, local_step step, std::size_t bytes) {
    const double per_byte = step == local_step::copy ? model_.copy_seconds_per_byte : model_.reduce_seconds_per_byte;
    if (per_byte <= 0 || bytes == 0) return no_slot;
    const std::uint32_t slot = make_op(rank, op_kind::local, -1, {}, bytes);
    rank_state& r = at(rank);
    r.reducing_until = std::max(now_, r.reducing_until) +
                       to_picoseconds(static_cast<double>(bytes) * per_byte * local_step_factor_ * model_.slowdown(rank));
    schedule(r.reducing_until, event_kind::reduced, rank, slot);
    return slot;
  }

  // True once the operation is done (its slot is then given back); throws its failure.
  bool test(int rank, std::uint32_t& slot) {
    if (aborted_by_ != not_aborted) throw error(errc::aborted, aborted_text(rank));
    op& o = at(rank).ops[slot];
    if (o.state == op_state::posted) return false;
    if (o.state == op_state::done) {
      release(rank, std::exchange(slot, no_slot));
      return true;
    }
    auto& failures = at(rank).failures;
    const auto f = std::find_if(failures.begin(), failures.end(), [&](const auto& e) { return e.first == slot; });
    const error failure = f->second;
    release(rank, std::exchange(slot, no_slot));
    throw failure;
  }

  // A send goes on to its receiver (its bytes were taken when it was posted); a
  // receive leaves its queue. Either way nothing touches the buffer afterwards.
  void cancel(int rank, std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    rank_state& r = at(rank);
    op& o = r.ops[slot];
    if (o.state == op_state::posted && (o.kind == op_kind::recv || o.kind == op_kind::recv_reduce)) {
      match_queue* q = r.queues.find({o.peer, o.tag()});
      if (q && !q->early) unlink(r, q, slot);
    }
    release(rank, std::exchange(slot, no_slot));
  }

  // Asks for an op's line, ahead of a test of it (world::run's `warm`).
  void prefetch_op(int rank, std::uint32_t slot) const noexcept {
    if (slot != no_slot) prefetch(ranks_[static_cast<std::size_t>(rank)].ops.data() + slot);
  }

  bool take_news(int rank) noexcept { return std::exchange(at(rank).news, false); }

  void watch(int rank, std::uint32_t slot, std::vector<std::uint32_t>* list, std::uint32_t key) noexcept {
    op& o = at(rank).ops[slot];
    o.watcher = list;
    o.key = key;
    if (o.state != op_state::posted || aborted()) tell_watcher(o);
  }

  // Every pending operation fails with errc::aborted when next tested.
  void abort(int by) {
    if (aborted_by_ == not_aborted) aborted_by_ = by;
    for (int r = 0; r < size(); ++r) {
      for (op& o : at(r).ops)
        if (o.state == op_state::posted) tell_watcher(o);
      note_news(r);
    }
  }
  bool aborted() const noexcept { return aborted_by_ != not_aborted; }

  // Steps every rank until each is done: `step(r)` advances rank r's calls without
  // waiting and returns true once they have all ended. A rank is stepped at the start
  // and whenever something of its own finished; between, the clock moves to the next
  // event. Where no event is left while ranks wait, the clock jumps `stall` ahead once,
  // so that their calls meet their deadlines; if they still wait, this throws.
  //
  // `warm(r, stage)` asks for the lines stepping rank r will read, ahead of it: stage 0
  // a few ranks before r is stepped, stage 1 nearer, once what stage 0 fetched is in,
  // stage 2 nearer still (the driver itself fetches the rank's state in those stages).
  template <class Step, class Warm>
  picoseconds run(Step&& step, Warm&& warm, picoseconds stall = to_picoseconds(24 * 3600.0)) {
    std::vector<char> finished(ranks_.size(), 0);
    int left = size();
    for (int r = 0; r < size(); ++r) note_news(r);
    bool jumped = false;
    for (;;) {
      for (std::size_t i = 0; i < ready_.size(); ++i) {  // it may grow meanwhile
        if (i + 3 * stepping_ahead < ready_.size()) {
          const int a = ready_[i + 3 * stepping_ahead];
          prefetch(&at(a));
          prefetch(reinterpret_cast<const char*>(&at(a)) + 64);
          warm(a, 0);
        }
        if (i + 2 * stepping_ahead < ready_.size()) {
          const int a = ready_[i + 2 * stepping_ahead];
          at(a).queues.prefetch_all();
          warm(a, 1);
        }
        if (i + stepping_ahead < ready_.size()) warm(ready_[i + stepping_ahead], 2);
        const int r = ready_[i];
        at(r).queued = false;
        if (!finished[std::size_t(r)] && step(r)) {
          finished[std::size_t(r)] = 1;
          --left;
        }
      }
      ready_.clear();
      if (left == 0) return now_;
      const picoseconds next = next_time();
      if (next == never) {
        if (jumped) throw error(errc::timeout, stalled_text(finished, left));
        jumped = true;
        now_ += stall;
        for (int r = 0; r < size(); ++r)
          if (!finished[std::size_t(r)]) note_news(r);
        continue;
      }
      now_ = next;
      end_flows();
      if (!events_.empty() && events_.first_time() == now_) {
        const std::vector<event>& bucket = events_.open_first();
        for (std::size_t i = 0; i < bucket.size(); ++i) {  // it may grow meanwhile
          if (i + 2 * reading_ahead < bucket.size()) fetch_first(bucket[i + 2 * reading_ahead]);
          if (i + reading_ahead < bucket.size()) fetch_then(bucket[i + reading_ahead]);
          const event e = bucket[i];
          ++events_handled_;
          handle(e);
        }
        events_.done();
      }
    }
  }

 private:
  static constexpr int not_aborted = -2;
  static constexpr picoseconds never = INT64_MAX;

  rank_state& at(int rank) { return ranks_[static_cast<std::size_t>(rank)]; }

  void check_peer(int rank, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank)
      throw error(errc::invalid_peer, "sim: rank " + std::to_string(rank) + " cannot send to rank " + std::to_string(peer) +
                                          " in a group of " + std::to_string(size()));
  }

  void note_news(int rank) {
    rank_state& r = at(rank);
    r.news = true;
    if (!r.queued) {
      r.queued = true;
      ready_.push_back(rank);
    }
  }

  // Once per op: a list must not name an op it has let go of.
  static void tell_watcher(op& o) noexcept {
    if (!o.watcher) return;
    try {
      o.watcher->push_back(o.key);
    } catch (...) {  // no memory: the executor's deadline ends the call
    }
    o.watcher = nullptr;
  }

  void finished(int rank, op& o, op_state state) {
    o.state = state;
    tell_watcher(o);
    note_news(rank);
  }

  void schedule(picoseconds when, event_kind kind, int rank, std::uint32_t id, std::uint32_t generation = UINT32_MAX) {
    if (generation == UINT32_MAX) generation = at(rank).ops[id].generation;
    events_.push(when, {kind, rank, id, generation});
  }

  std::uint32_t make_op(int rank, op_kind kind, int peer, message_tag tag, std::size_t bytes) {
    rank_state& r = at(rank);
    std::uint32_t slot = r.unused;
    if (slot == no_slot) {
      slot = static_cast<std::uint32_t>(r.ops.size());
      r.ops.emplace_back();
    } else {
      r.unused = r.ops[slot].next;
    }
    op& o = r.ops[slot];
    o.kind = kind;
    o.state = op_state::posted;
    o.peer = peer;
    o.call = tag.call;
    o.step = tag.step;
    o.bytes = bytes;
    return slot;
  }

  void release(int rank, std::uint32_t slot) {
    op& o = at(rank).ops[slot];
    if (o.state == op_state::failed) std::erase_if(at(rank).failures, [&](const auto& f) { return f.first == slot; });
    o.state = op_state::unused;
    ++o.generation;
    o.destination = nullptr;
    o.consume = nullptr;
    o.watcher = nullptr;
    o.next = std::exchange(at(rank).unused, slot);
  }

  std::uint32_t make_message(int rank, message_tag tag, std::span<const std::byte> data) {
    const std::uint32_t m = take_slot(messages_in_flight_, unused_messages_);
    message& msg = messages_in_flight_[m];
    msg.source = rank;
    msg.tag = tag;
    msg.bytes = data.size();
    if (carries_data_) msg.payload.assign(data.begin(), data.end());
    return m;
  }

  std::uint32_t post_receive(int rank, op_kind kind, int peer, message_tag tag, std::size_t bytes) {
    if (peer < 0 || peer >= size() || peer == rank)
      throw error(errc::invalid_peer, "sim: rank " + std::to_string(rank) + " cannot receive from rank " +
                                          std::to_string(peer) + " in a group of " + std::to_string(size()));
    return make_op(rank, kind, peer, tag, bytes);
  }

  template <class Next>
  static void append(match_queue& q, std::uint32_t i, Next&& next) {
    next(i) = no_slot;
    if (q.last == no_slot) q.first = i;
    else next(q.last) = i;
    q.last = i;
  }
  // The first of q, which leaves it (and q leaves the table once empty).
  template <class Next>
  static std::uint32_t take_first(match_table& table, match_queue* q, Next&& next) {
    const std::uint32_t i = q->first;
    q->first = next(i);
    if (q->first == no_slot) table.erase(q);
    return i;
  }
  // Takes a cancelled receive out of its queue.
  static void unlink(rank_state& r, match_queue* q, std::uint32_t slot) {
    std::uint32_t* link = &q->first;
    std::uint32_t before = no_slot;
    while (*link != slot && *link != no_slot) {
      before = *link;
      link = &r.ops[*link].next;
    }
    if (*link == no_slot) return;
    *link = r.ops[slot].next;
    if (q->last == slot) q->last = before;
    if (q->first == no_slot) r.queues.erase(q);
  }

  // A receive just posted takes the first early message for it, if one came.
  std::uint32_t match_posted(int rank, std::uint32_t slot) {
    rank_state& r = at(rank);
    const op& o = r.ops[slot];
    match_queue& q = r.queues.make({o.peer, o.tag()});
    if (!q.early || q.first == no_slot) {
      q.early = false;
      append(q, slot, [&](std::uint32_t s) -> std::uint32_t& { return r.ops[s].next; });
      return slot;
    }
    const std::uint32_t m = take_first(r.queues, &q, [&](std::uint32_t i) -> std::uint32_t& { return messages_in_flight_[i].next; });
    deliver(rank, slot, m, false);
    return slot;
  }

  const sim_link& link_of(link_class via) const noexcept {
    return via == link_class::on_host ? model_.on_host : model_.across_hosts;
  }
  double slow_link(int rank, link_class via) const noexcept {
    return via == link_class::across_hosts ? model_.link_slowdown(rank) : 1.0;
  }
  // Without shared bandwidth: how long a message keeps its sender's port.
  double sending_s(int rank, link_class via, std::size_t bytes) const noexcept {
    return (link_of(via).per_message_s + static_cast<double>(bytes) * seconds_per_byte_[int(via)] * slow_link(rank, via)) *
           model_.slowdown(rank);
  }

  // Without shared bandwidth: each port one message at a time.
  void send_through_ports(int rank, std::uint32_t slot, int peer, std::uint32_t m, link_class via, std::size_t bytes) {
    picoseconds& out = at(rank).sending_until[int(via)];
    const picoseconds leaves = std::max(now_, out);
    out = leaves + to_picoseconds(sending_s(rank, via, bytes));
    schedule(out, event_kind::sent, rank, slot);
    // The receiver's port takes messages in the order they reach it: one that waits for
    // its sender's port claims the receiver's only once it leaves, not ahead of messages
    // that other ranks send meanwhile.
    if (leaves > now_) schedule(leaves, event_kind::departs, peer, m, 0);
    else depart(peer, m);
  }

  // Message m leaves its sender's port now for `peer`, whose port takes its bytes once
  // the first has come and the messages ahead of it are in, and no faster than a slower
  // sender sends them.
  void depart(int peer, std::uint32_t m) {
    message& msg = messages_in_flight_[m];
    const link_class via = model_.same_host(msg.source, peer) ? link_class::on_host : link_class::across_hosts;
    const sim_link& link = link_of(via);
    const picoseconds sent = now_ + to_picoseconds(sending_s(msg.source, via, msg.bytes));
    picoseconds& in = at(peer).receiving_until[int(via)];
    msg.first_byte_at = std::max(now_ + to_picoseconds(link.per_message_s + link.latency_s), in);
    in = std::max(msg.first_byte_at + to_picoseconds(static_cast<double>(msg.bytes) * seconds_per_byte_[int(via)] *
                                                     model_.slowdown(peer) * slow_link(peer, via)),
                  sent + to_picoseconds(link.latency_s));
    schedule(in, event_kind::arrived, peer, m, 0);
  }

  // ---- Shared bandwidth (flows.hpp) ----------------------------------------------------

  // A message whose bytes flow (or wait to): what its end completes.
  struct flow_record {
    int rank, peer;
    std::uint32_t slot, generation, message;
    link_class via;
    double bytes;
  };

  // Links, numbered: per rank, its on-host ports (sending, receiving) and its NIC's; then
  // with a NIC per host, the hosts' NICs; then per leaf its uplinks (out, in) where they
  // block.
  void add_links() {
    const int hosts = (size() + model_.ranks_per_host - 1) / model_.ranks_per_host;
    for (int r = 0; r < size(); ++r) {
      const double slow = model_.slowdown(r), nic = model_.across_hosts.seconds_per_byte * slow * model_.link_slowdown(r);
      links_.add_link(model_.on_host.seconds_per_byte * slow);
      links_.add_link(model_.on_host.seconds_per_byte * slow);
      links_.add_link(nic);  // unused with a NIC per host
      links_.add_link(nic);
    }
    first_host_link_ = static_cast<std::uint32_t>(4 * size());
    if (model_.nic_per_host)
      for (int h = 0; h < hosts; ++h) {
        const double nic = model_.across_hosts.seconds_per_byte * model_.link_slowdown(h * model_.ranks_per_host);
        links_.add_link(nic);
        links_.add_link(nic);
      }
    first_leaf_link_ = first_host_link_ + (model_.nic_per_host ? 2u * std::uint32_t(hosts) : 0u);
    if (model_.leaves_block()) {
      const int nics_per_leaf = model_.hosts_per_leaf * (model_.nic_per_host ? 1 : model_.ranks_per_host);
      const double uplink = model_.across_hosts.seconds_per_byte * model_.oversubscription / nics_per_leaf;
      for (int l = 0; l <= model_.leaf_of(size() - 1); ++l) {
        links_.add_link(uplink);
        links_.add_link(uplink);
      }
    }
  }

  std::size_t path_of(int rank, int peer, link_class via, std::uint32_t* path) const {
    const auto r = std::uint32_t(rank), p = std::uint32_t(peer);
    if (via == link_class::on_host) {
      path[0] = 4 * r;
      path[1] = 4 * p + 1;
      return 2;
    }
    std::size_t hops = 2;
    if (model_.nic_per_host) {
      path[0] = first_host_link_ + 2 * std::uint32_t(model_.host_of(rank));
      path[1] = first_host_link_ + 2 * std::uint32_t(model_.host_of(peer)) + 1;
    } else {
      path[0] = 4 * r + 2;
      path[1] = 4 * p + 3;
    }
    if (model_.leaves_block() && model_.leaf_of(rank) != model_.leaf_of(peer)) {
      path[hops++] = first_leaf_link_ + 2 * std::uint32_t(model_.leaf_of(rank));
      path[hops++] = first_leaf_link_ + 2 * std::uint32_t(model_.leaf_of(peer)) + 1;
    }
    return hops;
  }

  void send_as_flow(int rank, std::uint32_t slot, int peer, std::uint32_t m, link_class via, std::size_t bytes) {
    const sim_link& link = link_of(via);
    picoseconds& posting = at(rank).posting_until;
    posting = std::max(now_, posting) + to_picoseconds(link.per_message_s * model_.slowdown(rank));
    if (bytes == 0) {
      schedule(posting, event_kind::sent, rank, slot);
      schedule(posting + to_picoseconds(link.latency_s), event_kind::arrived, peer, m, 0);
      return;
    }
    const std::uint32_t id = take_slot(records_, unused_records_);
    records_[id] = {rank, peer, slot, at(rank).ops[slot].generation, m, via, static_cast<double>(bytes)};
    if (posting > now_) schedule(posting, event_kind::flow_starts, rank, id, 0);
    else start_flow(id);
  }

  void start_flow(std::uint32_t record) {
    const flow_record& f = records_[record];
    messages_in_flight_[f.message].first_byte_at = now_ + to_picoseconds(link_of(f.via).latency_s);
    std::uint32_t path[flow_network::longest_path];
    const std::size_t hops = path_of(f.rank, f.peer, f.via, path);
    links_.start(now_, f.bytes, path, hops, record);
  }

  // The flows whose bytes are through now end in the order of their ends (then of their
  // numbers), which ending one does not change: they are taken out of that order first,
  // then ended one by one, reading ahead as for events (fetch_first).
  void end_flows() {
    ending_.clear();
    for (std::uint32_t f; (f = links_.first_to_end()) != flow_network::none && links_.end_of(f) == now_;) {
      links_.take_first();
      ending_.push_back(f);
    }
    const std::size_t n = ending_.size();
    for (std::size_t i = 0; i < n; ++i) {
      if (i + 4 * ending_ahead < n) links_.prefetch(ending_[i + 4 * ending_ahead]);
      if (i + 3 * ending_ahead < n) {
        const std::uint32_t f = ending_[i + 3 * ending_ahead];
        prefetch(&records_[links_.owner(f)]);
        links_.prefetch_links(f);
      }
      if (i + 2 * ending_ahead < n) prefetch(&at(records_[links_.owner(ending_[i + 2 * ending_ahead])].rank));
      if (i + ending_ahead < n) {
        const flow_record& f = records_[links_.owner(ending_[i + ending_ahead])];
        prefetch(at(f.rank).ops.data() + f.slot);
      }
      ++events_handled_;
      end_flow(ending_[i]);
    }
  }
  static constexpr std::size_t ending_ahead = 2;

  // The flow's bytes are through: its send is done, and its message arrives after the
  // link's latency.
  void end_flow(std::uint32_t id) {
    const auto record = static_cast<std::uint32_t>(links_.owner(id));
    const flow_record f = records_[record];
    unused_records_.push_back(record);
    links_.finish(id);
    handle({event_kind::sent, f.rank, f.slot, f.generation});
    schedule(now_ + to_picoseconds(link_of(f.via).latency_s), event_kind::arrived, f.peer, f.message, 0);
  }

  // The next time anything happens: an event, or a flow's end. Flows that started or
  // ended now are rated first.
  picoseconds next_time() {
    picoseconds next = events_.empty() ? never : events_.first_time();
    if (model_.shares_bandwidth) {
      links_.settle(now_);
      if (const std::uint32_t f = links_.first_to_end(); f != flow_network::none) next = std::min(next, links_.end_of(f));
    }
    return next;
  }

  // The driver reads ahead of the events it handles: the lines an event will touch
  // (its rank's state, its op, its message, the queue it matches in) are fetched while
  // the events before it are handled. Each rank's are cold by the time its next event
  // comes, thousands of ranks later, and one after another each miss would cost the
  // memory's whole latency. First what the event names, then what those lines name.
  static constexpr std::size_t reading_ahead = 6, stepping_ahead = 8;
  void fetch_first(const event& e) const noexcept {
    prefetch(&ranks_[static_cast<std::size_t>(e.rank)]);
    if (e.kind == event_kind::arrived || e.kind == event_kind::departs) prefetch(&messages_in_flight_[e.id]);
    else if (e.kind == event_kind::flow_starts) prefetch(&records_[e.id]);
  }
  void fetch_then(const event& e) const noexcept {
    const rank_state& r = ranks_[static_cast<std::size_t>(e.rank)];
    if (e.kind == event_kind::arrived) {
      const message& msg = messages_in_flight_[e.id];
      r.queues.prefetch({msg.source, msg.tag});
    } else if (e.kind == event_kind::sent || e.kind == event_kind::reduced) {
      prefetch(r.ops.data() + e.id);
    }
  }
  static void prefetch(const void* p) noexcept { detail::prefetch(p); }

  void handle(const event& e) {
    if (e.kind == event_kind::arrived) return arrive(e.rank, e.id);
    if (e.kind == event_kind::flow_starts) return start_flow(e.id);
    if (e.kind == event_kind::departs) return depart(e.rank, e.id);
    op& o = at(e.rank).ops[e.id];
    if (o.generation != e.generation || o.state != op_state::posted) return;  // cancelled since
    finished(e.rank, o, op_state::done);
  }

  void arrive(int rank, std::uint32_t m) {
    rank_state& r = at(rank);
    const message& msg = messages_in_flight_[m];
    match_queue& q = r.queues.make({msg.source, msg.tag});
    if (q.early || q.first == no_slot) {
      q.early = true;
      append(q, m, [&](std::uint32_t i) -> std::uint32_t& { return messages_in_flight_[i].next; });
      return;
    }
    const std::uint32_t slot = take_first(r.queues, &q, [&](std::uint32_t s) -> std::uint32_t& { return r.ops[s].next; });
    deliver(rank, slot, m, true);
  }

  // Message m lands in receive `slot`, now: its bytes are written (data mode), and the
  // receive is done, or, for a fused receive, once the rank's core has reduced it: from
  // now, or, if it `just_arrived` and the model says so, from its first byte on (or
  // from its posting, if that came later).
  void deliver(int rank, std::uint32_t slot, std::uint32_t m, bool just_arrived) {
    rank_state& r = at(rank);
    op& o = r.ops[slot];
    message& msg = messages_in_flight_[m];
    if (msg.bytes != o.bytes) {
      r.failures.emplace_back(slot, error(errc::buffer_size_mismatch, "sim: rank " + std::to_string(rank) + " expected " +
                                                                   std::to_string(o.bytes) + " bytes from rank " +
                                                                   std::to_string(msg.source) + ", which sent " +
                                                                   std::to_string(msg.bytes)));
      finished(rank, o, op_state::failed);
    } else if (o.kind == op_kind::recv_reduce && model_.reduce_seconds_per_byte > 0 && msg.bytes > 0) {
      if (carries_data_) o.sink()(0, msg.payload);
      const picoseconds from = just_arrived && model_.reduces_as_bytes_arrive
                                   ? std::max(std::min(msg.first_byte_at, now_), r.posted_at[slot])
                                   : now_;
      r.reducing_until = std::max(std::max(from, r.reducing_until) +
                                      to_picoseconds(static_cast<double>(msg.bytes) * model_.reduce_seconds_per_byte *
                                                     model_.slowdown(rank)),
                                  now_);
      schedule(r.reducing_until, event_kind::reduced, rank, slot);
    } else {
      if (carries_data_ && msg.bytes > 0) {
        if (o.kind == op_kind::recv) std::memcpy(o.destination, msg.payload.data(), msg.bytes);
        else o.sink()(0, msg.payload);
      }
      finished(rank, o, op_state::done);
    }
    msg.payload.clear();
    unused_messages_.push_back(m);
  }

  std::string aborted_text(int rank) const {
    return "rank " + std::to_string(rank) + ": the simulated group was aborted" +
           (aborted_by_ >= 0 ? " by rank " + std::to_string(aborted_by_) : std::string());
  }

  std::string stalled_text(const std::vector<char>& finished, int left) const {
    std::string s = "sim: " + std::to_string(left) + " ranks wait for messages no rank sends (ranks";
    int named = 0;
    for (int r = 0; r < size() && named < 8; ++r)
      if (!finished[std::size_t(r)]) s += (named++ ? ", " : " ") + std::to_string(r);
    return s + (left > named ? ", ...)" : ")");
  }

  cluster_model model_;
  bool carries_data_;
  // Without shared bandwidth, each class of link's seconds per byte for the calls that run (set_call_bytes).
  double seconds_per_byte_[2] = {model_.on_host.seconds_per_byte, model_.across_hosts.seconds_per_byte};
  double local_step_factor_ = 1;  // how much dearer than in cache a local step's bytes are (set_call_bytes)
  flow_network links_;
  std::uint32_t first_host_link_ = 0, first_leaf_link_ = 0;
  std::vector<flow_record> records_;
  std::vector<std::uint32_t> unused_records_;
  std::vector<std::uint32_t> ending_;  // end_flows()' flows
  std::vector<rank_state> ranks_;
  std::vector<message> messages_in_flight_;
  std::vector<std::uint32_t> unused_messages_;
  event_queue events_;
  std::vector<int> ready_;
  picoseconds now_ = 0;
  std::uint64_t messages_ = 0, events_handled_ = 0;
  int aborted_by_ = not_aborted;
};

}  // namespace collectives::sim_detail
