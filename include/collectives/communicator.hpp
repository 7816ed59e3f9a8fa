// A communicator: one rank's handle on a group, owning that rank's transport.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

#include "concepts/transport.hpp"
#include "concepts/transport_selection.hpp"
#include "error.hpp"
#include "runtime/in_flight.hpp"
#include "runtime/plan_cache.hpp"
#include "runtime/progress_thread.hpp"
#include "runtime/shared_transport.hpp"
#include "runtime/workspace.hpp"
#include "settings.hpp"

namespace collectives {

inline constexpr std::chrono::milliseconds default_timeout{std::chrono::seconds{60}};

namespace detail {

template <class Transport>
class hosts_exchange;  // detail/hosts.hpp

// Where a communicator keeps its transport. A transport of its own lives in a
// shared_transport, which the groups split from it share; a group's transport
// (transport/subgroup.hpp) is a view that points at its job's shared_transport.
template <class Transport>
struct transport_holder {
  explicit transport_holder(Transport t) : home(std::make_shared<shared_transport<Transport>>(std::move(t))) {}
  Transport& get() noexcept { return home->transport; }
  const Transport& get() const noexcept { return home->transport; }
  shared_transport<Transport>& shared() const noexcept { return *home; }
  const std::shared_ptr<shared_transport<Transport>>& share() const noexcept { return home; }
  explicit operator bool() const noexcept { return home != nullptr; }
  std::shared_ptr<shared_transport<Transport>> home;
};

template <class Transport>
  requires requires(const Transport& t) {
    { t.shared() } -> std::same_as<shared_transport<typename Transport::base_type>&>;
  }
struct transport_holder<Transport> {
  explicit transport_holder(Transport t) : view(std::move(t)), held(true) {}
  transport_holder(transport_holder&& o) noexcept : view(std::move(o.view)), held(std::exchange(o.held, false)) {}
  transport_holder& operator=(transport_holder&& o) noexcept {
    view = std::move(o.view);
    held = std::exchange(o.held, false);
    return *this;
  }
  Transport& get() noexcept { return view; }
  const Transport& get() const noexcept { return view; }
  auto& shared() const noexcept { return view.shared(); }
  const auto& share() const noexcept { return view.shared_pointer(); }
  explicit operator bool() const noexcept { return held; }
  Transport view;
  bool held;
};

// What a transport offers beyond the concept: joining the job the environment
// describes, and a survivors' group after a failure.
template <class Transport>
concept joins_from_env = requires { Transport::from_env(); };
template <class Transport>
concept shrinks = requires(Transport& t, deadline until) {
  { t.shrink(until) } -> std::same_as<Transport>;
};

}  // namespace detail

template <class Transport>
class communicator {
  static_assert(check_transport<Transport>());

 public:
  using transport_type = Transport;

  // COLLECTIVES_PROGRESS_THREAD (a flag) starts a progress thread.
  explicit communicator(Transport transport, std::chrono::milliseconds timeout = default_timeout);
  // Not while calls are in flight: they refer to the transport. A progress thread
  // moves along: it holds the calls in flight, which live on the heap.
  communicator(communicator&&) = default;
  communicator& operator=(communicator&& o) noexcept;

  // Non-blocking calls still in flight are waited for, each until its deadline, so
  // that no message lands in a buffer after this; one that does not finish by then
  // is cancelled, and its handle reports why.
  ~communicator();

  // A communicator for the job the environment describes, for transports that can
  // join one that way (shm, tcp, automatic_transport). The timeout comes from
  // COLLECTIVES_TIMEOUT (seconds). A transport fixed in code wins over
  // COLLECTIVES_TRANSPORT, with a warning when that asks for another.
  static communicator from_env()
    requires detail::joins_from_env<Transport>;

  // COLLECTIVES_TIMEOUT in seconds (fractions allowed), or the default.
  static std::chrono::milliseconds timeout_from_env() {
    return settings::seconds("COLLECTIVES_TIMEOUT").value_or(default_timeout);
  }

  int rank() const { return transport().rank(); }
  int size() const { return transport().size(); }

  Transport& transport() noexcept { return transport_.get(); }
  const Transport& transport() const noexcept { return transport_.get(); }

  // The time by the transport's clock (steady_clock unless it keeps its own: now_of),
  // which every deadline of its calls is counted in.
  deadline now() const { return now_of(transport()); }

  // Every blocking call fails with errc::timeout once this much time has passed.
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) noexcept { timeout_ = t; }

  // With call checking on, every collective first confirms that all ranks made the
  // same call (collective, counts, element size, op, root, algorithm) and otherwise
  // throws errc::call_mismatch naming a rank that differs, instead of timing out or
  // computing garbage. It costs one small exchange per call and must be on for every
  // rank or for none. The default comes from the environment variable
  // COLLECTIVES_CHECK_CALLS (a flag: 1, on, true or yes turn it on).
  bool checks_calls() const noexcept { return check_calls_; }
  void check_calls(bool on) noexcept { check_calls_ = on; }

  // A failure as the library's error, for the handles of the calls it ends.
  static error failure_of(std::exception_ptr failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const error& e) {
      return e;
    } catch (const std::exception& e) {
      return error(errc::aborted, std::string("the progress thread failed: ") + e.what());
    } catch (...) {
      return error(errc::aborted, "the progress thread failed");
    }
  }

  // Wakes every pending and future operation of the whole group with errc::aborted.
  // A group split from a job shares its transport: aborting either aborts both.
  void abort() { transport().abort(); }

  // After a failure: every rank's pending and future calls on this communicator fail
  // promptly with errc::aborted, naming the rank that revoked it, whichever rank
  // noticed first. The same as abort(); the name says what comes next: shrink().
  void revoke() { abort(); }

  // The ranks that live, as a new communicator: ranks renumbered in order, the same
  // timeout and call checking. Every surviving rank calls it, and all get the same
  // group, even when more ranks fail meanwhile; this communicator is revoked first
  // and gives only errors from then on (docs/fault-tolerance.md). Throws
  // errc::timeout when a rank that lives does not call it within the timeout.
  communicator shrink()
    requires detail::shrinks<Transport>;

  // Each collective call takes the next number, so messages of consecutive calls
  // never match each other. Every rank must make the same calls in the same order.
  std::uint64_t next_call() noexcept { return ++calls_; }

  // The plans of recent calls, reused when a call repeats.
  plan_cache& plans() noexcept { return plans_; }

  // The non-blocking calls started and not yet finished (nonblocking.hpp).
  in_flight_calls& in_flight() noexcept { return *in_flight_; }

  // Advances every call in flight without waiting; true when any of them moved.
  // Testing or waiting for any handle does this too. The calls of the groups that
  // share this communicator's transport move as well.
  bool progress() {
    auto turn = exclusive();
    return transport_.shared().poll_all();
  }

  // A thread that advances the calls in flight while this rank computes, so that
  // they move without test() or progress() (docs/nonblocking.md#the-progress-thread).
  // Calls are still started from one thread at a time; handles may then be tested and
  // waited for from any thread. One thread serves a job's communicator and every
  // group split from it, whichever of them started it.
  void start_progress_thread();
  // Waits for the thread to end its round; the calls in flight stay, for the
  // caller to advance. Not while this thread holds exclusive(). Stops it for the
  // groups that share it too.
  void stop_progress_thread() noexcept { transport_.shared().progress.reset(); }
  bool has_progress_thread() const noexcept { return transport_.shared().progress != nullptr; }

  // Held while this thread works on the transport or the calls in flight: it keeps
  // the progress thread out meanwhile. Does nothing when there is none.
  [[nodiscard]] progress_thread::exclusive exclusive() {
    return progress_thread::exclusive(transport_.shared().progress.get());
  }

  // Sleeps until the progress thread has moved a call, or `call` has ended, or `until`.
  void await_progress(const in_flight_call& call, deadline until) {
    if (auto& thread = transport_.shared().progress) thread->await_round(until, [&] { return !call.running(); });
  }

  // A call has started: a progress thread idle for lack of calls looks again.
  void wake_progress() {
    if (auto& thread = transport_.shared().progress) thread->wake();
  }

  // What a blocking call does while it waits: advances the calls in flight of this
  // communicator and of the groups that share its transport.
  bool progress_in_flight() { return transport_.shared().progress_all(); }

  // Each rank's host (0, 1, ... in the order of their first ranks), learned by the
  // first call whose algorithm needs it (detail/hosts.hpp); empty until then.
  std::vector<int>& hosts() noexcept { return hosts_; }
  // The hosts' exchange while it runs as a stage of calls started without waiting;
  // null otherwise (detail/hosts.hpp).
  std::shared_ptr<detail::hosts_exchange<Transport>>& pending_hosts() noexcept { return pending_hosts_; }

  // The link costs automatic picks by, per class of link: settled by the first call
  // that chooses (detail/measured_costs.hpp; measured with COLLECTIVES_TUNE=1); unset
  // until then. A group split from this communicator takes them as they are.
  std::optional<link_classes>& link_figures() noexcept { return link_figures_; }

  // What this communicator shares with the groups split from it (split.hpp).
  auto& shared() const noexcept { return transport_.shared(); }
  const auto& share() const noexcept { return transport_.share(); }

  // Groups of this communicator's ranks, each with a communicator of its own that
  // sends through this one's transport (docs/groups.md). Every rank calls it, as a
  // collective: ranks with the same color >= 0 form a group, ordered by key, then by
  // rank here; a rank with a negative color gets std::nullopt. The group's
  // communicator takes this one's timeout and call checking.
  template <class Self = communicator>
  auto split(int color, int key) {
    static_assert(requires(Self& self) { split_communicator(self, 0, 0); },
                  "collectives: comm.split needs <collectives/split.hpp> (or <collectives/collectives.hpp>)");
    return split_communicator(static_cast<Self&>(*this), color, key);
  }
  // One group per host: the ranks that share this one's host, in rank order.
  template <class Self = communicator>
  auto split_by_host() {
    static_assert(requires(Self& self) { split_communicator_by_host(self); },
                  "collectives: comm.split_by_host needs <collectives/split.hpp> (or <collectives/collectives.hpp>)");
    return split_communicator_by_host(static_cast<Self&>(*this));
  }

  // The executor's bookkeeping, reused from call to call.
  executor_workspace<typename Transport::request>& workspace() noexcept { return workspace_; }

  // For the debug log: true when `call` now runs a different algorithm than it last did.
  bool note_algorithm(std::string_view call, const char* algorithm);

 private:
  // Waits for this communicator's calls in flight (see the destructor) and leaves
  // the transport's list. The progress thread stops with the last communicator
  // that shares it.
  void release() noexcept;

  detail::transport_holder<Transport> transport_;
  std::chrono::milliseconds timeout_;
  std::uint64_t calls_ = 0;
  plan_cache plans_;
  executor_workspace<typename Transport::request> workspace_;
  std::unique_ptr<in_flight_calls> in_flight_ = std::make_unique<in_flight_calls>();
  std::vector<std::pair<std::string, const char*>> algorithms_;
  std::vector<int> hosts_;
  std::shared_ptr<detail::hosts_exchange<Transport>> pending_hosts_;
  std::optional<link_classes> link_figures_;
  bool check_calls_ = settings::flag("COLLECTIVES_CHECK_CALLS").value_or(false);
};

// The members out of the class, so that they are not inline: for the built-in
// transports the compiled library instantiates the communicator once (each
// transport's header declares it `extern template`), and no unit of a program
// compiles it again.

template <class Transport>
communicator<Transport>::communicator(Transport transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)), timeout_(timeout) {
  {
    auto turn = exclusive();
    transport_.shared().calls_in_flight.push_back(in_flight_.get());
  }
  if (settings::flag("COLLECTIVES_PROGRESS_THREAD").value_or(false)) start_progress_thread();
}

template <class Transport>
communicator<Transport>& communicator<Transport>::operator=(communicator&& o) noexcept {
  if (this != &o) {
    release();
    transport_ = std::move(o.transport_);
    timeout_ = o.timeout_;
    calls_ = o.calls_;
    plans_ = std::move(o.plans_);
    workspace_ = std::move(o.workspace_);
    in_flight_ = std::move(o.in_flight_);
    algorithms_ = std::move(o.algorithms_);
    hosts_ = std::move(o.hosts_);
    pending_hosts_ = std::move(o.pending_hosts_);
    link_figures_ = std::move(o.link_figures_);
    check_calls_ = o.check_calls_;
  }
  return *this;
}

template <class Transport>
communicator<Transport>::~communicator() {
  release();
}

// from_env and shrink test their constraint again inside: clang 14 instantiates them in
// an explicit instantiation of the class even where it fails (GCC 12 leaves them out).

template <class Transport>
communicator<Transport> communicator<Transport>::from_env()
  requires detail::joins_from_env<Transport>
{
  if constexpr (detail::joins_from_env<Transport>) {
    if constexpr (!selectable_name<Transport>.empty()) warn_if_other_transport_selected(selectable_name<Transport>);
    return communicator(Transport::from_env(), timeout_from_env());
  } else {
    throw error(errc::invalid_config, "this transport cannot join a job from the environment");
  }
}

template <class Transport>
communicator<Transport> communicator<Transport>::shrink()
  requires detail::shrinks<Transport>
{
  if constexpr (detail::shrinks<Transport>) {
    revoke();
    auto turn = exclusive();  // the shrink drives the transport itself
    communicator next(transport().shrink(now() + timeout_), timeout_);
    next.check_calls_ = check_calls_;
    return next;
  } else {
    throw error(errc::invalid_config, "this transport cannot shrink a group");
  }
}

template <class Transport>
void communicator<Transport>::start_progress_thread() {
  auto& shared = transport_.shared();
  if (shared.progress) return;
  shared.progress = std::make_unique<progress_thread>([&shared](handover_request owner_waits) {
    if (shared.nothing_in_flight()) return progress_thread::round::nothing_in_flight;
    try {
      return shared.poll_all(owner_waits) ? progress_thread::round::moved : progress_thread::round::waiting;
    } catch (...) {  // the transport failed outside any call: every call ends with it, none waits on
      for (auto* calls : shared.calls_in_flight) calls->abandon_all(failure_of(std::current_exception()));
      return progress_thread::round::moved;
    }
  });
}

template <class Transport>
bool communicator<Transport>::note_algorithm(std::string_view call, const char* algorithm) {
  for (auto& [c, a] : algorithms_)
    if (c == call) return std::exchange(a, algorithm) != algorithm;
  algorithms_.emplace_back(std::string(call), algorithm);
  return true;
}

template <class Transport>
void communicator<Transport>::release() noexcept {
  if (!transport_ || !in_flight_) return;  // moved from
  auto& shared = transport_.shared();
  const bool last = shared.calls_in_flight.size() == 1;
  if (last) stop_progress_thread();
  auto turn = exclusive();
  while (!in_flight_->empty()) {
    try {
      if (in_flight_->progress()) continue;
      transport().wait_for_activity(now() + std::chrono::milliseconds(10));
    } catch (...) {
      break;
    }
  }
  in_flight_->abandon_all(error(errc::aborted, "the communicator was destroyed while this call was in flight"));
  std::erase(shared.calls_in_flight, in_flight_.get());
}

// Overrides a communicator's timeout for the calls made while it lives.
template <class Communicator>
class scoped_timeout {
 public:
  scoped_timeout(Communicator& comm, std::chrono::milliseconds t) : comm_(comm), saved_(comm.timeout()) {
    comm_.set_timeout(t);
  }
  ~scoped_timeout() { comm_.set_timeout(saved_); }
  scoped_timeout(const scoped_timeout&) = delete;
  scoped_timeout& operator=(const scoped_timeout&) = delete;

 private:
  Communicator& comm_;
  std::chrono::milliseconds saved_;
};

}  // namespace collectives
