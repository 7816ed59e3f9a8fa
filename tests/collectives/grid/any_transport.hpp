// The grids' transport: whichever transport the test chose when it started (inproc,
// faulty<inproc>, or automatic_transport's shm, tcp or rdma), reached through the
// virtual interface automatic_transport plugs rdma in by. The grids' calls are then
// compiled once, for this one type, with no transport's code inlined into each of
// them.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <collectives/transport/detail/plugged_transport.hpp>

namespace testing {

class any_transport {
 public:
  using request = collectives::transport_detail::slot_request;

  template <class T>
  explicit any_transport(T chosen)
      : chosen_(std::make_unique<collectives::transport_detail::plugged<T>>(std::move(chosen))) {}

  std::string_view name() const noexcept { return chosen_->name(); }
  std::string describe() const { return chosen_->describe(); }
  collectives::link_costs current_costs() const { return chosen_->costs(); }
  int rank() const { return chosen_->rank(); }
  int size() const { return chosen_->size(); }
  request post_send(int peer, collectives::message_tag tag, std::span<const std::byte> data) {
    return chosen_->post_send(peer, tag, data);
  }
  request post_recv(int peer, collectives::message_tag tag, std::span<std::byte> into) {
    return chosen_->post_recv(peer, tag, into);
  }
  request post_recv_reduce(int peer, collectives::message_tag tag, std::size_t bytes, std::size_t granule,
                           collectives::chunk_sink sink) {
    return chosen_->post_recv_reduce(peer, tag, bytes, granule, sink);
  }
  bool test(request& r) { return chosen_->test(r); }
  bool wait_for_activity(collectives::deadline until) { return chosen_->wait_for_activity(until); }
  void cancel(request& r) noexcept { chosen_->cancel(r); }
  void abort() { chosen_->abort(); }
  void note_failure(std::string_view what) noexcept { chosen_->note_failure(what); }

 private:
  std::unique_ptr<collectives::transport_detail::plugged_transport> chosen_;
};

}  // namespace testing
