// The Transport concept's calls for a transport built on the matching engine: each
// forwards to the transport's wire (shm's FIFOs, tcp's connections), which owns the
// matching engine. A request is the slot of its operation, the same type for every
// such transport, so a transport that picks one at run time passes it on as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "../../concepts/transport.hpp"
#include "../../error.hpp"
#include "matching.hpp"

namespace collectives::transport_detail {

struct slot_request {
  std::uint32_t slot = no_slot;
};

template <class Wire>
class wire_transport {
 public:
  using request = slot_request;

  int rank() const { return wire_->rank(); }
  int size() const { return wire_->size(); }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) { return {wire_->post_send(peer, tag, data)}; }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) { return {wire_->post_recv(peer, tag, into)}; }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return {wire_->post_recv_reduce(peer, tag, bytes, granule, sink)};
  }
  bool test(request& r) { return wire_->test(r.slot); }
  bool wait_for_activity(deadline until) { return wire_->wait_for_activity(until); }
  void cancel(request& r) noexcept { wire_->cancel(r.slot); }
  void abort() { wire_->abort(); }
  // Why this rank's call failed, for the peers it tells when it leaves.
  void note_failure(std::string_view what) noexcept {
    try {
      if (wire_) wire_->note_own_failure(what);
    } catch (...) {  // no memory for the text: the peers learn less
    }
  }

 protected:
  explicit wire_transport(std::unique_ptr<Wire> wire) : wire_(std::move(wire)) {}

  // An empty message to and from every peer: when it is done, every rank has finished
  // its start-up, so nobody needs the store any more and the first call finds all ready.
  // The lower rank of each pair speaks first and the higher answers once the greeting
  // came, so that a provider that connects on the first message (libfabric's rxm) sees
  // one connection request per pair, never two crossing.
  void greet_everyone(message_tag hello, deadline until) {
    std::vector<request> pending;
    std::vector<std::pair<int, request>> greetings;  // from the lower ranks, to answer
    for (int p = 0; p < size(); ++p) {
      if (p > rank()) {
        pending.push_back(post_send(p, hello, {}));
        pending.push_back(post_recv(p, hello, {}));
      } else if (p < rank()) {
        greetings.emplace_back(p, post_recv(p, hello, {}));
      }
    }
    try {
      while (!pending.empty() || !greetings.empty()) {
        std::erase_if(pending, [&](request& r) { return test(r); });
        std::erase_if(greetings, [&](std::pair<int, request>& g) {
          if (!test(g.second)) return false;
          pending.push_back(post_send(g.first, hello, {}));
          return true;
        });
        if (pending.empty() && greetings.empty()) break;
        if (clock::now() >= until || !wait_for_activity(until))
          throw error(errc::timeout, "rank " + std::to_string(rank()) + ": start-up timed out waiting for every rank to connect");
      }
    } catch (...) {
      for (auto& r : pending) cancel(r);
      for (auto& g : greetings) cancel(g.second);
      throw;
    }
  }

  // Behind a pointer, so the transport moves while its wire stays put (handlers and
  // peers' doorbells refer to it).
  std::unique_ptr<Wire> wire_;
};

}  // namespace collectives::transport_detail
