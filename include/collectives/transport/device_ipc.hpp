// Device messages between the processes of one host: each rank exports a block of
// device memory (its inbox), every other rank maps it, and a message is copied
// chunk by chunk into the receiver's inbox and from there to where the matching
// engine says it lands (device_ipc/wire.hpp). The shm transport carries everything
// else: host messages, and the small notices that say "chunk ready in slot k" and
// "slot k is free again".
//
// The protocol is written against a device runtime (concepts/device_runtime.hpp), so
// the same code runs on CUDA (cuda_ipc.hpp) and, for the tests, on host memory
// standing in for device memory (tests/device/host_runtime.hpp), where every step but
// the device itself can be checked on machines without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "../bootstrap/environment.hpp"
#include "../bootstrap/job_token.hpp"
#include "../concepts/device_runtime.hpp"
#include "../concepts/transport.hpp"
#include "../memory_space.hpp"
#include "device_ipc/options.hpp"
#include "device_ipc/wire.hpp"
#include "shm/transport.hpp"

namespace collectives {

template <class Runtime>
class device_ipc {
  static_assert(check_device_runtime<Runtime>());
  using wire = device_ipc_detail::wire<Runtime>;

 public:
  using memory_space = typename Runtime::memory_space;
  // Estimates, not yet measured on a GPU: a message's start-up is an event poll and a
  // notice (some microseconds); bytes move at NVLink-class copy-engine rates.
  static constexpr link_costs costs{.latency_s = 10e-6, .per_message_s = 2e-6, .seconds_per_byte = 1.0 / 100e9,
                                    .reduce_seconds_per_byte = 1.0 / 200e9};
  // Of device messages (host messages are shm's), with the default options: a large
  // early message waits in the inbox.
  static constexpr transport_traits traits{.sends = send_completion::when_buffered,
                                           .fifo_equal_tags = true,
                                           .early_message_bytes = device_ipc_options{}.early.message_bytes,
                                           .large_early_message_blocks_peer = true,
                                           .sender_sees_size_refusal = false,
                                           .cancel_halfway = cancel_mid_transfer::link_fails,
                                           .reports_departed_peer = true,
                                           .ranks_can_be_processes = true,
                                           .one_host = true};

  // A host request is shm's; a device one is the slot of its operation in the wire's
  // matching engine.
  struct request {
    shm::request host{};
    std::uint32_t device = transport_detail::no_slot;
    bool on_device = false;
  };

  // Joins over `host` (which every rank of the group has made), exchanging inbox
  // handles through it. Blocks until every rank has mapped every peer's inbox.
  device_ipc(shm host, Runtime runtime, device_ipc_options options, deadline until)
      : wire_(std::make_unique<wire>(std::move(host), std::move(runtime), options)) {
    wire_->connect(until);
  }

  // The job the launcher described, on this host: shm for the host side, and the
  // runtime's choice of device for this local rank.
  static device_ipc from_env(device_ipc_options options = device_ipc_options::from_env()) {
    const auto launch = bootstrap::detect_launch();
    const auto startup = shm_options::from_env().startup_timeout;
    shm host = shm::join(launch, auth::job_token::from_env(bootstrap::warns_of_default_token(launch)));
    return device_ipc(std::move(host), Runtime::for_local_rank(launch.local_rank), options, clock::now() + startup);
  }

  int rank() const { return wire_->rank(); }
  int size() const { return wire_->size(); }
  shm& host() noexcept { return wire_->host(); }
  Runtime& runtime() noexcept { return wire_->runtime(); }
  const device_ipc_options& options() const noexcept { return wire_->options(); }

  memory_ops<memory_space> memory_operations(memory_space) { return wire_->runtime().memory_operations(); }

  // Host messages.
  request post_send(int peer, message_tag tag, std::span<const std::byte> data) { return {host().post_send(peer, tag, data)}; }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return {host().post_recv(peer, tag, into)}; }

  // Device messages: `data` and `into` are device memory.
  request post_send(int peer, message_tag tag, std::span<const std::byte> data, memory_space) {
    return {{}, wire_->post_send(peer, tag, data), true};
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into, memory_space) {
    return {{}, wire_->post_recv(peer, tag, into), true};
  }

  bool test(request& r) {
    if (r.on_device) return wire_->test(r.device);
    if (wire_->busy()) wire_->progress();  // device messages keep moving while host ones are awaited
    return host().test(r.host);
  }

  bool wait_for_activity(deadline until) {
    // A device copy finishing wakes nobody: while one is under way, look again soon.
    if (wire_->copying()) {
      std::this_thread::yield();
      return true;
    }
    return host().wait_for_activity(until);
  }

  void cancel(request& r) noexcept {
    if (r.on_device) wire_->cancel(r.device);
    else host().cancel(r.host);
  }
  void abort() { host().abort(); }

  std::string describe() const {
    const device_ipc_options& o = wire_->options();
    return "device_ipc rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " on " + wire_->runtime().describe() +
           ": inbox of " + std::to_string(o.slots) + " slots of " + std::to_string(o.slot_bytes >> 10) + " KiB per sender";
  }

 private:
  // Behind a pointer, so the transport moves while the wire stays put (shm reads the
  // notices it sends out of the wire's memory).
  std::unique_ptr<wire> wire_;
};

}  // namespace collectives
