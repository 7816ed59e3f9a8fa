// What every front-end call shares: argument checks that throw before any byte
// moves, and the step from a call to its schedule and executor.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../algorithm/automatic.hpp"
#include "../algorithm/schedule.hpp"
#include "../communicator.hpp"
#include "../concepts/algorithm.hpp"
#include "../concepts/buffer.hpp"
#include "../concepts/reduce_op.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../ops/host_reduce.hpp"
#include "../runtime/executor.hpp"
#include "../runtime/in_flight.hpp"
#include "../transport/declarations.hpp"
#include "call_check.hpp"
#include "hosts.hpp"
#include "measured_costs.hpp"

namespace collectives {

namespace detail {

inline void check_root(const char* call, int root, int size) {
  if (root < 0 || root >= size)
    throw error(errc::invalid_root, std::string(call) + ": root " + std::to_string(root) +
                                        " is not a rank of a communicator of size " + std::to_string(size));
}

inline void check_size(const char* call, const char* what, std::size_t actual, std::size_t expected) {
  if (actual != expected)
    throw error(errc::buffer_size_mismatch, std::string(call) + ": " + what + " has " + std::to_string(actual) +
                                                " elements, expected " + std::to_string(expected));
}

inline std::size_t checked_product(const char* call, std::size_t a, std::size_t b) {
  if (b != 0 && a > std::numeric_limits<std::size_t>::max() / b)
    throw error(errc::count_overflow, std::string(call) + ": " + std::to_string(a) + " x " + std::to_string(b) +
                                          " elements overflow size_t");
  return a * b;
}

inline std::size_t checked_total(const char* call, std::span<const std::size_t> counts) {
  std::size_t total = 0;
  for (auto c : counts) {
    if (c > std::numeric_limits<std::size_t>::max() - total)
      throw error(errc::count_overflow, std::string(call) + ": the counts add up to more than size_t holds");
    total += c;
  }
  return total;
}

// A buffer of `count` elements of T must also fit in bytes.
template <class T>
void check_bytes(const char* call, std::size_t count) {
  checked_product(call, count, sizeof(T));
}

inline void check_counts(const char* call, std::span<const std::size_t> counts, int size) {
  check_size(call, "counts", counts.size(), static_cast<std::size_t>(size));
}

// Size of the slot each rank has in an in-place P*N buffer.
inline std::size_t slot_of(const char* call, std::size_t total, int size) {
  if (total % static_cast<std::size_t>(size) != 0)
    throw error(errc::buffer_size_mismatch, std::string(call) + ": an in-place buffer of " + std::to_string(total) +
                                                " elements does not split into " + std::to_string(size) + " equal parts");
  return total / static_cast<std::size_t>(size);
}

// A buffer as a span that keeps its memory space: a device_span stays one, any other
// contiguous range becomes a std::span.
template <class R>
auto as_span(R&& r) {
  if constexpr (requires { typename std::remove_cvref_t<R>::memory_space; }) return std::remove_cvref_t<R>(r);
  else return std::span{r};
}

// An in-place buffer of an even collective: all P*N elements, and this rank's slot.
template <class Span>
struct in_place_parts {
  Span all, own;
};

template <class Span>
in_place_parts<Span> even_parts(const char* call, Span all, int rank, int size) {
  const std::size_t n = slot_of(call, all.size(), size);
  return {all, all.subspan(static_cast<std::size_t>(rank) * n, n)};
}

// The same for a v-form, whose parts of counts[i] elements lie back to back.
template <class Span>
in_place_parts<Span> uneven_parts(const char* call, Span all, std::span<const std::size_t> counts, int rank, int size) {
  check_counts(call, counts, size);
  check_size(call, "data", all.size(), checked_total(call, counts));
  const auto r = static_cast<std::size_t>(rank);
  const auto displ = plan::displacements(counts.first(r));
  return {all, all.subspan(displ.back(), counts[r])};
}

// The compile-time checks of a reducing call: a valid op, and one the algorithm can
// apply in the order it reduces.
template <class Algorithm, class Op, class T>
constexpr bool check_reduction() {
  static_assert(check_reduce_op<Op, T>());
  static_assert(Algorithm::preserves_rank_order || is_commutative_v<Op>,
                "collectives: this algorithm applies the op out of rank order and the op is not declared "
                "commutative: add `static constexpr bool commutative = true;` to it, wrap it with "
                "collectives::commutative(op), or use an algorithm that keeps rank order (automatic does)");
  return true;
}

// The algorithm that will run the call: Algorithm itself, or the one a composition
// such as automatic picks.
template <class Algorithm, class Kind>
const char* running_algorithm(Kind k, const plan_request& r) {
  if constexpr (requires { { Algorithm::chosen_name(k, r) } -> std::convertible_to<const char*>; })
    return Algorithm::chosen_name(k, r);
  else
    return Algorithm::name;
}

// The size of a call for the log: the buffer, or for a v-form every rank's part
// together (all_to_allv: what this rank sends and receives).
inline std::string bytes_of_call(const plan_request& r) {
  const auto total = [&](std::span<const std::size_t> counts) {
    return std::to_string(std::accumulate(counts.begin(), counts.end(), std::size_t{0}) * r.element_size);
  };
  if (!r.recv_counts.empty()) return total(r.counts) + " bytes sent and " + total(r.recv_counts) + " received";
  if (!r.counts.empty()) return total(r.counts) + " bytes in all";
  return std::to_string(r.count * r.element_size) + " bytes";
}

// With COLLECTIVES_DEBUG=INFO: which algorithm each kind of call runs, whenever that
// changes (automatic picks by size).
template <class Algorithm, class Kind, class Communicator>
void log_algorithm(const Communicator& comm, const char* call, Kind k, const plan_request& r) {
  if (!log::enabled(log::level::info)) return;
  const char* chosen = running_algorithm<Algorithm>(k, r);
  if (!comm.note_algorithm(call, chosen)) return;
  std::string why;  // automatic: "ring (automatic: ring 41 us, tree 60 us, ...)"
  if constexpr (requires { Algorithm::estimates(k, r); })
    why = std::string(" (") + Algorithm::name + ": " + Algorithm::estimates(k, r) + ")";
  log::info("rank " + std::to_string(r.rank) + ": " + call + " of " + bytes_of_call(r) + " runs " + chosen + why);
}

// Runs a call of this rank to its end on this thread, advancing the calls in flight
// meanwhile. Compiled per transport: the element type, op and memory space are `work`'s.
template <transport Tr>
void run_call(communicator<Tr>& comm, const compact_plan& plan, const call_context& ctx, const void* input, void* output,
              element_work& work) {
  executor_core<Tr>(plan, comm.transport(), input, output, work, comm.workspace()).run(ctx, [&] {
    return comm.progress_in_flight();
  });
}

// Hands a call to the communicator's calls in flight, which run it (first its stages,
// if any: the call check, the hosts) while the caller goes on. Compiled per transport.
template <transport Tr>
void start_call(communicator<Tr>& comm, std::shared_ptr<const compact_plan> plan, const call_context& ctx, const void* input, void* output,
                owned_element_work work, call_stages&& first) {
  in_flight_calls& flight = comm.in_flight();
  flight.launch(std::make_shared<started_call<Tr>>(std::move(plan), comm.transport(), input, output, std::move(work), ctx,
                                                   flight.take_kept(), std::move(first)));
}

// Runs a plan of this rank to its end, advancing the calls in flight meanwhile; or,
// when a non-blocking call is starting it (nonblocking.hpp), starts it and returns.
// `first`: what a started call runs before its own messages (its call check, the
// hosts' exchange, after which `first.plan` makes the plan where `plan` is null). What
// is made here per (element type, op) is the element work; the rest is per transport.
template <class Space, transport Tr, class T, class Op>
void run_plan(communicator<Tr>& comm, const std::shared_ptr<const compact_plan>& plan, const call_context& ctx,
              const T* input, T* output, Op& op, call_stages&& first = {}) {
  static_assert(check_moves_memory<Tr, Space>());
  auto turn = comm.exclusive();  // keeps a progress thread off the transport meanwhile
  if (comm.in_flight().starting()) {
    start_call(comm, plan, ctx, input, output,
               owned_element_work::make<T, Op, Space>(memory_ops_of<Space>(comm.transport()), op), std::move(first));
    return;
  }
  typed_element_work<T, Op, Space> work(memory_ops_of<Space>(comm.transport()), op);
  run_call(comm, *plan, ctx, input, output, work);
}

// What planning a call needs from its communicator, with the transport's type left
// behind: the group, the transport's link figures, the plan cache, and the exchanges a
// call may make first (the call check and the hosts, now or as the stages of a call
// that starts without waiting; the link figures; the hosts and the figures are each
// learned once and kept by the communicator). So plan_call is compiled once per
// algorithm and kind, whatever the transport, and once in the library for the default
// algorithm.
class call_services {
 public:
  // The communicator's exchanges, as functions of its address.
  struct exchanges {
    void (*check_same_call)(void* comm, const char* call, const call_signature& mine);
    std::unique_ptr<call_prologue> (*check_later)(void* comm, const char* call, const call_signature& mine);
    std::span<const int> (*hosts)(void* comm, const char* call);
    std::unique_ptr<hosts_stage> (*hosts_later)(void* comm, const char* call);
    const link_classes& (*link_figures)(void* comm, const char* call);
    bool (*note_algorithm)(void* comm, std::string_view call, const char* algorithm);
  };

  template <transport Tr>
  call_services(communicator<Tr>& comm, const exchanges& of_comm)
      : rank(comm.rank()), size(comm.size()), costs(costs_of(comm.transport())), checks_calls(comm.checks_calls()),
        plans(comm.plans()), comm_(&comm), exchanges_(&of_comm) {}

  const int rank, size;
  const link_costs costs;  // the transport's own figures
  const bool checks_calls;
  plan_cache& plans;

  void check_same_call(const char* call, const call_signature& mine) const { exchanges_->check_same_call(comm_, call, mine); }
  std::unique_ptr<call_prologue> check_later(const char* call, const call_signature& mine) const {
    return exchanges_->check_later(comm_, call, mine);
  }
  std::span<const int> hosts(const char* call) const { return exchanges_->hosts(comm_, call); }
  std::unique_ptr<hosts_stage> hosts_later(const char* call) const { return exchanges_->hosts_later(comm_, call); }
  const link_classes& link_figures(const char* call) const { return exchanges_->link_figures(comm_, call); }
  bool note_algorithm(std::string_view call, const char* algorithm) const {
    return exchanges_->note_algorithm(comm_, call, algorithm);
  }

 private:
  void* comm_;
  const exchanges* exchanges_;
};

// The exchanges of a communicator over Tr.
template <transport Tr>
inline constexpr call_services::exchanges exchanges_of{
    [](void* comm, const char* call, const call_signature& mine) {
      check_same_call(*static_cast<communicator<Tr>*>(comm), call, mine);
    },
    [](void* comm, const char* call, const call_signature& mine) -> std::unique_ptr<call_prologue> {
      return std::make_unique<call_check_stage<Tr>>(*static_cast<communicator<Tr>*>(comm), call, mine);
    },
    [](void* comm, const char* call) { return hosts_of(*static_cast<communicator<Tr>*>(comm), call); },
    [](void* comm, const char* call) { return hosts_later(*static_cast<communicator<Tr>*>(comm), call); },
    [](void* comm, const char* call) -> const link_classes& {
      return link_classes_of(*static_cast<communicator<Tr>*>(comm), call);
    },
    [](void* comm, std::string_view call, const char* algorithm) {
      return static_cast<communicator<Tr>*>(comm)->note_algorithm(call, algorithm);
    }};

template <transport Tr>
call_services services_of(communicator<Tr>& comm) {
  return call_services(comm, exchanges_of<Tr>);
}

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
// The built-in transports' exchanges are compiled in the library (impl/src.hpp).
call_services services_of(communicator<inproc>& comm);
call_services services_of(communicator<shm>& comm);
call_services services_of(communicator<tcp>& comm);
call_services services_of(communicator<automatic_transport>& comm);
#endif

// The buffers each collective splits into one block per rank (compact_plan.hpp).
template <class Kind>
inline constexpr blocks_per_rank blocks_by_rank_in{};
template <>
inline constexpr blocks_per_rank blocks_by_rank_in<kind::all_reduce>{.input = true, .output = true};
template <>
inline constexpr blocks_per_rank blocks_by_rank_in<kind::reduce_scatter>{.input = true};
template <>
inline constexpr blocks_per_rank blocks_by_rank_in<kind::all_gather>{.output = true};
template <>
inline constexpr blocks_per_rank blocks_by_rank_in<kind::all_to_all>{.input = true, .output = true};

// An algorithm that picks among others by the link costs (automatic).
template <class Algorithm, class Kind>
inline constexpr bool chooses_by_links = requires(Kind k, const plan_request& r) { Algorithm::chosen_name(k, r); };

// Whether the ranks run on more than one host.
inline bool spans_hosts(std::span<const int> hosts) {
  return std::any_of(hosts.begin(), hosts.end(), [&](int h) { return h != hosts[0]; });
}

// The plan of a call started before the hosts were known, made once they are: `req`
// with its counts copied, since the caller's may be gone by then. `across`: the
// figures that cost a call spanning hosts, where they differ from the host's own. The
// plan is the call's own (the plan cache and the INFO log are the communicator's,
// which a call in flight does not reach).
template <class Algorithm, class Kind>
std::function<std::shared_ptr<const compact_plan>(std::span<const int>)> plan_later(Kind kind, const plan_request& req,
                                                                                     std::optional<link_costs> across) {
  return [kind, req, across, counts = std::vector<std::size_t>(req.counts.begin(), req.counts.end()),
          recv_counts = std::vector<std::size_t>(req.recv_counts.begin(), req.recv_counts.end())](std::span<const int> hosts) {
    plan_request r = req;
    r.counts = counts;
    r.recv_counts = recv_counts;
    if constexpr (plans_by_hosts<Algorithm, Kind>) r.hosts = hosts;
    if (across && spans_hosts(hosts)) r.costs = *across;
    return std::make_shared<const compact_plan>(plan_of<Algorithm>(kind, r), r.rank, r.size);
  };
}

// The plan of one call of this rank: the call check, the link figures and hosts the
// algorithm plans by, and the plan cache. The element type and op enter only through
// `req` and `op_fingerprint`, and the transport only through `comm`. A plan the cache
// does not keep goes to `uncached`. With `later`, for a call that starts without
// waiting, the call check and the hosts' exchange become the call's first stages
// instead of running now; where the hosts are not known yet, the plan is made after
// them (`later->plan`) and the plan returned is null.
template <class Algorithm, class Kind>
const std::shared_ptr<const compact_plan>& plan_call(const call_services& comm, const char* call, Kind kind,
                                                    plan_request& req, std::uint64_t op_fingerprint,
                                                    std::shared_ptr<const compact_plan>& uncached, call_stages* later) {
  req.rank = comm.rank;
  req.size = comm.size;
  req.costs = req.on_host_costs = comm.costs;
  if (comm.checks_calls) {  // all_to_allv's counts differ by rank by design
    const call_signature mine = signature_of(call, req, op_fingerprint, type_fingerprint<Algorithm>(),
                                             !std::is_same_v<Kind, kind::all_to_allv>);
    if (later) later->check = comm.check_later(call, mine);
    else comm.check_same_call(call, mine);
  }
  // An algorithm that chooses picks by the figures of the links the call crosses,
  // measured (COLLECTIVES_TUNE) by the communicator's first call that chooses, which
  // waits for that even when it starts without waiting: the one exchange that does.
  const link_classes* links = nullptr;
  bool figures_differ = false;  // by class of link: then the call's hosts decide
  if constexpr (chooses_by_links<Algorithm, Kind>) {
    links = &comm.link_figures(call);
    req.on_host_costs = req.costs = links->on_host;
    figures_differ = !same_figures(links->on_host, links->across_hosts);  // the same on every rank
  }
  std::span<const int> hosts;
  if (plans_by_hosts<Algorithm, Kind> || figures_differ) {
    if (later && (later->hosts = comm.hosts_later(call))) {
      later->plan = plan_later<Algorithm>(kind, req, figures_differ ? std::optional(links->across_hosts) : std::nullopt);
      return uncached = nullptr;
    }
    hosts = comm.hosts(call);
  }
  if constexpr (plans_by_hosts<Algorithm, Kind>) req.hosts = hosts;
  if (figures_differ && spans_hosts(hosts)) req.costs = links->across_hosts;
  log_algorithm<Algorithm>(comm, call, kind, req);
  if (!plan_cache::keeps(req))
    return uncached = std::make_shared<const compact_plan>(plan_of<Algorithm>(kind, req), req.rank, req.size);
  return comm.plans.find_or_make(plan_cache::key_of<Algorithm, Kind>(req), req.rank, req.size, blocks_by_rank_in<Kind>,
                                 [&] { return plan_of<Algorithm>(kind, req); });
}

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
// The default algorithm's plans, for every collective, are compiled in the library
// (impl/src.hpp).
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::broadcast, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_reduce, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::gather, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::gatherv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::scatter, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::scatterv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_gather, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_gatherv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce_scatter, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::reduce_scatterv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_to_all, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::all_to_allv, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
extern template const std::shared_ptr<const compact_plan>& plan_call<automatic>(const call_services&, const char*, kind::barrier, plan_request&, std::uint64_t, std::shared_ptr<const compact_plan>&, call_stages*);
#endif

// Plans the call with Algorithm and runs it on this rank.
template <class Algorithm, class Space = host_memory, class Kind, transport Tr, class T, class Op>
void run(communicator<Tr>& comm, const char* call, Kind kind, plan_request req, const T* input, T* output, Op& op) {
  static_assert(std::is_trivially_copyable_v<T>,
                "collectives: the element type must be trivially copyable (it travels as bytes)");
  req.element_size = sizeof(T);
  req.finalize = has_finalize<Op, T>;
  req.commutative = is_commutative_v<Op>;
  auto turn = comm.exclusive();
  std::shared_ptr<const compact_plan> uncached;  // a plan the cache does not keep: this call's only
  call_stages first;  // a started call's: the call check, the hosts, the plan made after them
  const std::shared_ptr<const compact_plan>& plan = plan_call<Algorithm>(services_of(comm), call, kind, req, type_fingerprint<Op>(), uncached,
                                              comm.in_flight().starting() ? &first : nullptr);
  run_plan<Space>(comm, plan, call_context::starting_at(comm.now(), call, comm.next_call(), comm.timeout()), input, output, op,
                  std::move(first));
}

}  // namespace detail
}  // namespace collectives
