// rdma's door: a TCP socket each rank listens on from start-up and keeps for the
// group's life, where the survivors of a failure agree on the shrunk group (the same
// agreement as tcp's, tcp/shrink.hpp) and swap the addresses of their new endpoints.
// The fabric's links can't carry that: after a failure a transfer given up halfway
// leaves them out of step, and only a refused TCP connection says at once that a
// process is gone (the kernel closes a dead process's door).
//
// Unlike tcp's, this door admits visitors only while its rank shrinks (admit() until
// stop_admitting()). Until then a visitor waits in the kernel's backlog, which already
// tells it that the rank lives.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "../../bootstrap/auth.hpp"
#include "../../log.hpp"
#include "../tcp/door.hpp"

namespace collectives::rdma_detail {

class door {
 public:
  using tcp = boost::asio::ip::tcp;

  // Listens on `where` (an address of this host the other ranks reach).
  door(const boost::asio::ip::address& where, auth::job_token token, std::chrono::milliseconds handshake_limit)
      : acceptor_(io_), token_(std::move(token)), handshake_limit_(handshake_limit) {
    acceptor_.open(where.is_v6() ? tcp::v6() : tcp::v4());
    acceptor_.bind({where, 0});
    acceptor_.listen();
  }
  door(const door&) = delete;
  door& operator=(const door&) = delete;

  tcp::endpoint endpoint() const { return acceptor_.local_endpoint(); }

  // The group's doors, by rank, and the shrink attempt that made the group (0: the
  // job's start): a visit to shrink counts only from a later attempt, so that a
  // visitor late from an earlier group can't touch this one.
  void enter_group(std::vector<tcp::endpoint> doors, std::uint32_t epoch) {
    doors_ = std::move(doors);
    epoch_ = epoch;
  }

  // What the agreement needs of the group it leaves (tcp/shrink.hpp).
  boost::asio::io_context& io() { return io_; }
  const std::vector<tcp::endpoint>& doors() const { return doors_; }
  const auth::job_token& token() const { return token_; }
  std::uint32_t epoch() const { return epoch_; }
  std::function<void(tcp_detail::visitor)> on_agreement;
  std::vector<tcp_detail::visitor> early_agreements;  // from ranks at a later attempt than this rank
  // Run between the agreement's steps: the shrinking group's transport moves its
  // messages, so that its peers hear of the abort while this rank agrees.
  std::function<void()> meanwhile = [] {};

  // Admits visitors as the io_context runs: a rank come to shrink goes to on_agreement
  // (or waits in early_agreements), any other is turned away.
  void admit() {
    io_.restart();  // it stops whenever it runs out of work
    admitting_ = true;
    admit_next();
  }
  void stop_admitting() {
    admitting_ = false;
    boost::system::error_code ignored;
    acceptor_.cancel(ignored);
    io_.poll();  // the cancelled accept's handler
    on_agreement = nullptr;
    meanwhile = [] {};
  }

 private:
  void admit_next() {
    if (!admitting_) return;
    auto socket = std::make_shared<tcp::socket>(io_);
    acceptor_.async_accept(*socket, [this, socket](const boost::system::error_code& ec) {
      if (!admitting_) return;
      if (!ec)
        auth::async_admit(socket, token_, auth::purpose::shrink, [this, socket](auth::outcome o) {
          if (!o.accepted) return log::debug("rdma: turned away a visitor at this rank's door: " + o.why);
          const auto v = tcp_detail::visit::of(o.hello);
          if (v.kind != tcp_detail::visit_kind::agree || v.attempt <= epoch_) return tcp_detail::close_quietly(*socket);
          if (on_agreement) on_agreement({v.rank, v.attempt, socket});
          else early_agreements.push_back({v.rank, v.attempt, socket});
        }, handshake_limit_);
      admit_next();
    });
  }

  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  auth::job_token token_;
  std::chrono::milliseconds handshake_limit_;
  std::vector<tcp::endpoint> doors_;
  std::uint32_t epoch_ = 0;
  bool admitting_ = false;
};

}  // namespace collectives::rdma_detail
