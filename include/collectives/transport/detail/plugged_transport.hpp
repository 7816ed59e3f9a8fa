// The transports automatic_transport reaches through a pointer: shm and tcp, whose
// headers (Asio and OpenSSL for tcp) a program using automatic_transport then need
// not compile, and rdma, whose header a program includes only when it links that
// transport's own target (libfabric): rdma's header plugs itself in (rdma_socket()).
// automatic_transport stays the same type whether or not rdma is plugged in, so
// translation units and collectives::compiled built with and without it agree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../bootstrap/environment.hpp"
#include "../../bootstrap/job_token.hpp"
#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "wire_transport.hpp"

namespace collectives::transport_detail {

class plugged_transport {
 public:
  using request = slot_request;
  virtual ~plugged_transport() = default;

  virtual std::string_view name() const noexcept = 0;
  virtual std::string describe() const = 0;
  virtual link_costs costs() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual request post_send(int peer, message_tag tag, std::span<const std::byte> data) = 0;
  virtual request post_recv(int peer, message_tag tag, std::span<std::byte> into) = 0;
  virtual request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) = 0;
  virtual bool test(request& r) = 0;
  virtual bool wait_for_activity(deadline until) = 0;
  virtual void cancel(request& r) noexcept = 0;
  virtual void abort() = 0;
  virtual void note_failure(std::string_view what) noexcept = 0;
  // Each rank's host where the transport knows them (hosts_known_to), else empty.
  virtual std::vector<int> hosts() const = 0;
  // The survivors' group, over the same transport (docs/fault-tolerance.md).
  virtual std::unique_ptr<plugged_transport> shrink(deadline until) = 0;
};

// Any transport behind that interface: rdma in a program that includes it, and, in
// the tests, inproc, faulty<inproc> and automatic_transport, so that one build of a
// collective grid runs its ranks as threads or as processes. Its request must be one
// slot number, as slot_request is; what a transport leaves out (its name, costs,
// describe, note_failure) is filled in as the concept's defaults say.
template <class T>
class plugged final : public plugged_transport {
 public:
  explicit plugged(T t) : t_(std::move(t)) {}
  std::string_view name() const noexcept override {
    if constexpr (requires { t_.name(); }) return t_.name();
    else if constexpr (requires { T::selection_name; }) return T::selection_name;
    else return "plugged";
  }
  std::string describe() const override {
    if constexpr (requires { t_.describe(); }) return t_.describe();
    else return std::string(name());
  }
  link_costs costs() const override { return costs_of(t_); }
  int rank() const override { return t_.rank(); }
  int size() const override { return t_.size(); }
  request post_send(int peer, message_tag tag, std::span<const std::byte> data) override {
    return outer(t_.post_send(peer, tag, data));
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) override {
    return outer(t_.post_recv(peer, tag, into));
  }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) override {
    return outer(t_.post_recv_reduce(peer, tag, bytes, granule, sink));
  }
  bool test(request& r) override {
    typename T::request inner{r.slot};
    const bool done = t_.test(inner);
    r = outer(inner);
    return done;
  }
  bool wait_for_activity(deadline until) override { return t_.wait_for_activity(until); }
  void cancel(request& r) noexcept override {
    typename T::request inner{r.slot};
    t_.cancel(inner);
    r = outer(inner);
  }
  void abort() override { t_.abort(); }
  void note_failure(std::string_view what) noexcept override {
    if constexpr (requires { t_.note_failure(what); }) t_.note_failure(what);
  }
  std::vector<int> hosts() const override { return hosts_known_to(t_); }
  std::unique_ptr<plugged_transport> shrink(deadline until) override {
    if constexpr (requires { { t_.shrink(until) } -> std::same_as<T>; }) {
      return std::make_unique<plugged>(t_.shrink(until));
    } else {
      throw error(errc::invalid_config, "rank " + std::to_string(rank()) + ": " + std::string(name()) +
                                            " cannot shrink a group yet (docs/fault-tolerance.md): only shm, tcp and rdma can");
    }
  }

 private:
  static_assert(requires(typename T::request r) { { r.slot } -> std::convertible_to<std::uint32_t>; } &&
                    sizeof(typename T::request) == sizeof(request),
                "plugged<T>: T's request must be one slot number, as slot_request is");
  static request outer(typename T::request r) { return {r.slot}; }

  T t_;
};

// How automatic_transport reaches the rdma transport, once its header set it.
struct rdma_plug {
  std::unique_ptr<plugged_transport> (*join)(const bootstrap::launch_info&, const auth::job_token&) = nullptr;
  bool (*hardware_present)() = nullptr;  // a hardware fabric provider is here
};
inline rdma_plug& rdma_socket() {
  static rdma_plug plug;
  return plug;
}

}  // namespace collectives::transport_detail
