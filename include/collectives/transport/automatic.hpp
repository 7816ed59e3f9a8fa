// A transport chosen when the job starts: shared memory when every rank of the job
// is on this host; across hosts, RDMA where the program has it (it includes
// <collectives/transport/rdma.hpp> and links collectives::rdma) and libfabric offers a
// hardware provider, else TCP; or whichever COLLECTIVES_TRANSPORT names. One program
// binary then runs well on one host and across hosts. Link with collectives::tcp (it
// contains shm and tcp).
//
//   auto comm = collectives::communicator<collectives::automatic_transport>::from_env();
//
// COLLECTIVES_TRANSPORT = auto (the default) | shm | tcp | rdma. `auto` decides from
// what the launcher says: shm when LOCAL_WORLD_SIZE equals WORLD_SIZE (or Open MPI's or
// Slurm's equivalents), otherwise rdma on a hardware fabric provider, else tcp. Every
// rank must come to the same answer, or ranks of different transports wait for each
// other until the start-up deadline; launchers tell every rank the same sizes, so this
// holds unless a rank's environment differs (set COLLECTIVES_TRANSPORT explicitly then).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "../bootstrap/environment.hpp"
#include "../bootstrap/job_token.hpp"
#include "../communicator.hpp"
#include "../concepts/transport.hpp"
#include "../config.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "detail/plugged_transport.hpp"
#include "selection.hpp"
#include "shm.hpp"
#include "tcp.hpp"

namespace collectives {

struct automatic_options {
  transport_selection selection = transport_selection::automatic;
  shm_options shm{};
  tcp_options tcp{};

  // COLLECTIVES_TRANSPORT, and each transport's own variables.
  static automatic_options from_env() {
    return {.selection = selected_transport(), .shm = shm_options::from_env(), .tcp = tcp_options::from_env()};
  }
};

class automatic_transport {
 public:
  // shm, tcp and rdma share their request type (the slot of an operation in their
  // matching engine), so a request passes through as it is.
  using request = transport_detail::slot_request;

 private:
  using plugged = std::unique_ptr<transport_detail::plugged_transport>;

  // Calls fn on whichever transport is in use; every call goes through here. (Defined
  // before the members that use them, which deduce their return types from them.)
  template <class Fn>
  decltype(auto) on_chosen(Fn&& fn) {
    if (shm* s = std::get_if<shm>(&chosen_)) return fn(*s);
    if (tcp* t = std::get_if<tcp>(&chosen_)) return fn(*t);
    return fn(**std::get_if<plugged>(&chosen_));
  }
  template <class Fn>
  decltype(auto) on_chosen(Fn&& fn) const {
    if (const shm* s = std::get_if<shm>(&chosen_)) return fn(*s);
    if (const tcp* t = std::get_if<tcp>(&chosen_)) return fn(*t);
    return fn(std::as_const(**std::get_if<plugged>(&chosen_)));
  }

 public:
  explicit automatic_transport(shm t) : chosen_(std::move(t)) {}
  explicit automatic_transport(tcp t) : chosen_(std::move(t)) {}
  // A transport plugged in by its own header (rdma).
  explicit automatic_transport(plugged t) : chosen_(std::move(t)) {}

  // Joins the job `launch` describes over the transport `options.selection` asks for.
  COLLECTIVES_DECL static automatic_transport join(const bootstrap::launch_info& launch, const auth::job_token& token,
                                                   automatic_options options = automatic_options::from_env());

  // The job as the launcher described it, and COLLECTIVES_JOB_TOKEN.
  COLLECTIVES_DECL static automatic_transport from_env(automatic_options options = automatic_options::from_env());

  // "shm", "tcp" or "rdma".
  std::string_view name() const noexcept {
    if (const plugged* p = std::get_if<plugged>(&chosen_)) return (*p)->name();
    return std::holds_alternative<shm>(chosen_) ? "shm" : "tcp";
  }
  std::string describe() const {
    return on_chosen([](const auto& t) { return t.describe(); });
  }
  // The automatic algorithm's figures are those of the transport in use.
  link_costs current_costs() const {
    if (const plugged* p = std::get_if<plugged>(&chosen_)) return (*p)->costs();
    return on_chosen([](const auto& t) {
      if constexpr (requires { std::remove_cvref_t<decltype(t)>::costs; }) return std::remove_cvref_t<decltype(t)>::costs;
      else return link_costs{};
    });
  }

  // Over shm every rank is on this host; tcp knows them from its start-up; rdma does
  // not know them (hosts_known_to).
  std::vector<int> hosts() const {
    if (std::holds_alternative<shm>(chosen_)) return std::vector<int>(static_cast<std::size_t>(size()), 0);
    if (const tcp* t = std::get_if<tcp>(&chosen_)) return t->hosts();
    return {};
  }

  int rank() const {
    return on_chosen([](const auto& t) { return t.rank(); });
  }
  int size() const {
    return on_chosen([](const auto& t) { return t.size(); });
  }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    return on_chosen([&](auto& t) { return t.post_send(peer, tag, data); });
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    return on_chosen([&](auto& t) { return t.post_recv(peer, tag, into); });
  }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return on_chosen([&](auto& t) { return t.post_recv_reduce(peer, tag, bytes, granule, sink); });
  }
  bool test(request& r) {
    return on_chosen([&](auto& t) { return t.test(r); });
  }
  bool wait_for_activity(deadline until) {
    return on_chosen([&](auto& t) { return t.wait_for_activity(until); });
  }
  void cancel(request& r) noexcept {
    on_chosen([&](auto& t) { t.cancel(r); });
  }
  void abort() {
    on_chosen([](auto& t) { t.abort(); });
  }
  void note_failure(std::string_view what) noexcept {
    on_chosen([&](auto& t) { t.note_failure(what); });
  }
  // The survivors' group, over the same kind of transport (docs/fault-tolerance.md);
  // shm and tcp only.
  automatic_transport shrink(deadline until) {
    if (std::holds_alternative<plugged>(chosen_))
      throw error(errc::invalid_config, "rank " + std::to_string(rank()) + ": " + std::string(name()) +
                                            " cannot shrink a group yet (docs/fault-tolerance.md): only shm and tcp can");
    if (shm* s = std::get_if<shm>(&chosen_)) return automatic_transport(s->shrink(until));
    return automatic_transport(std::get_if<tcp>(&chosen_)->shrink(until));
  }

 private:
  static_assert(std::is_same_v<shm::request, request> && std::is_same_v<tcp::request, request>,
                "automatic_transport: shm and tcp share their request type");

  struct decision {
    transport_selection use;  // shm, tcp or rdma
    std::string reason;
  };

  COLLECTIVES_DECL static decision decide(const bootstrap::launch_info& launch, transport_selection selection);

  std::variant<shm, tcp, plugged> chosen_;
};

}  // namespace collectives

#if defined(COLLECTIVES_SEPARATE_COMPILATION)
namespace collectives {
// Compiled in the library (impl/src.hpp).
extern template class executor_core<automatic_transport>;
extern template class communicator<automatic_transport>;
}  // namespace collectives
#else
#include "automatic.ipp"
#endif
