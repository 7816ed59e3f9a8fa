// The first meeting of a job's ranks: opens the store they all share, as the launch
// describes it. With COLLECTIVES_STORE_DIR set that is a file store in that directory;
// under torchrun's agent store, that store (c10d_store.hpp); when every rank is on this
// host and the launcher names the job (and neither that nor MASTER_ADDR/MASTER_PORT is
// set), a file store in a private directory of this host; otherwise rank 0 serves a TCP
// store on MASTER_PORT and every rank, rank 0 included, connects to it at MASTER_ADDR.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "../concepts/transport.hpp"
#include "../error.hpp"
#include "../log.hpp"
#include "../settings.hpp"
#include "auth.hpp"
#include "c10d_store.hpp"
#include "environment.hpp"
#include "file_store.hpp"
#include "private_directory.hpp"
#include "store.hpp"
#include "tcp_store.hpp"

namespace collectives::bootstrap {

struct store_session {
  std::unique_ptr<tcp_store_server> server;  // on rank 0 of a TCP store only
  std::unique_ptr<key_value_store> store;
  // In a private directory (launch_info::job_on_this_host), when the job has only the
  // public default token: a fresh secret rank 0 made and wrote there, which only this
  // user can read. The transport then admits connections by it instead.
  std::optional<auth::job_token> agreed_token;
  // The private directory, which the last rank to close its session removes.
  std::filesystem::path private_directory;
  // Rank 0 serves the other ranks until they are done with the store: closing its
  // session closes its own client, then waits up to this long for every other rank to
  // hang up. Otherwise a rank still reading the answer to its last request (say, the
  // release from a final barrier that rank 0 completed) would find the store gone.
  std::chrono::milliseconds linger{10000};

  store_session() = default;
  store_session(store_session&&) = default;
  store_session& operator=(store_session&&) = delete;  // which store goes first would be a trap
  ~store_session() {
    leave_private_directory();
    store.reset();
    if (!server) return;
    for (const auto until = clock::now() + linger; server->clients() > 0 && clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }

 private:
  // Each rank counts itself in and out of one counter; the one that brings it to zero
  // has the only remaining use of the directory and removes it. No rank touches the
  // store after its own count out, so the removal never pulls the directory from under
  // another rank's request. A start-up that failed (a rank never came) ends at zero
  // too: start-up waits for every rank, so no rank leaves before all have counted in
  // unless the start-up fails. (A rank killed on the way leaves the directory behind,
  // in memory under /dev/shm, until the next boot or a manual rm.)
  void leave_private_directory() noexcept {
    if (private_directory.empty() || !store) return;
    try {
      if (store->add("collectives/ranks-present", -1) > 0) return;
      std::error_code ignored;
      std::filesystem::remove_all(private_directory, ignored);
    } catch (const std::exception& e) {
      log::warn(std::string("could not leave the job's directory ") + private_directory.string() + ": " + e.what());
    }
  }
};

namespace detail {

// The same port on every interface of the address's family.
inline boost::asio::ip::tcp::endpoint every_interface(const boost::asio::ip::tcp::endpoint& e) {
  return {e.address().is_v6() ? boost::asio::ip::tcp::v6() : boost::asio::ip::tcp::v4(), e.port()};
}

// Where rank 0's store listens: MASTER_ADDR itself when it is an IP address (so that
// 127.0.0.1 keeps the store to this host), unless COLLECTIVES_STORE_LISTEN=any. A host
// name gets every interface: it may name another address here than elsewhere (Debian
// maps a host's own name to 127.0.1.1).
inline boost::asio::ip::tcp::endpoint store_listen_endpoint(const launch_info& launch) {
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(without_brackets(launch.master_addr), ec);
  if (ec) return {boost::asio::ip::tcp::v4(), launch.master_port};
  const boost::asio::ip::tcp::endpoint itself{address, launch.master_port};
  if (settings::choice("COLLECTIVES_STORE_LISTEN").value_or("master_addr") == "master_addr") return itself;
  return every_interface(itself);
}

// 32 random bytes as 64 hex digits.
inline std::string fresh_secret() {
  const auto bytes = auth::detail::fresh_nonce();
  static constexpr char hex[] = "0123456789abcdef";
  std::string text;
  for (const unsigned char b : bytes) text.append({hex[b >> 4], hex[b & 15]});
  return text;
}

// Each communicator of the job meets in a directory of its own, numbered in the order
// each rank creates them (the same order on every rank): the last rank to leave one
// removes it while faster ranks may already be meeting in the next.
inline std::string communicator_on_this_host(const std::string& job, int rank) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, int> opened;  // by rank too: ranks may be threads of one process
  std::lock_guard lock(mutex);
  return job + " communicator " + std::to_string(opened[{job, rank}]++);
}

// The ranks of a job on this host meet in a directory only this user can enter, made
// for the job the launcher named.
inline store_session open_private_store(const launch_info& launch, const auth::job_token& token, deadline until) {
  store_session session;
  session.private_directory = open_private_directory(communicator_on_this_host(launch.job_on_this_host, launch.rank));
  session.store = std::make_unique<file_store>(session.private_directory);
  session.store->add("collectives/ranks-present", 1);
  if (token.is_public_default()) {
    if (launch.rank == 0) session.store->set("collectives/job-token", fresh_secret());
    session.agreed_token = auth::job_token(session.store->get("collectives/job-token", until));
  }
  return session;
}

// A client of the TCP store; a rank other than 0 that finds something else at the
// store's address is told so in those words.
inline std::unique_ptr<tcp_store> connect_tcp_store(const launch_info& launch, const auth::job_token& token,
                                                    deadline until) {
  try {
    return std::make_unique<tcp_store>(launch.master_addr, launch.master_port, token, until);
  } catch (const error& e) {
    if (e.code() != errc::protocol_error) throw;
    std::string why = e.what();
    if (const auto code = ": " + e.code().message(); why.ends_with(code)) why.resize(why.size() - code.size());
    throw error(errc::protocol_error, "MASTER_ADDR:MASTER_PORT (" + endpoint_text(launch.master_addr, launch.master_port) +
                                          ") is served by something that is not this job's store (another program "
                                          "holds the port?): " + why);
  }
}

}  // namespace detail

// Opens this rank's view of the job's store; `until` bounds connecting to it (ranks
// may start well before rank 0's server is up).
inline store_session open_store(const launch_info& launch, const auth::job_token& token, deadline until) {
  store_session session;
  if (const auto dir = settings::text("COLLECTIVES_STORE_DIR")) {
    // A subdirectory per job token, so jobs that share the directory never collide; the
    // digest names it without writing the secret itself into the file system.
    const auto job = detail::sha256_hex(token.secret()).substr(0, 16);
    session.store = std::make_unique<file_store>(std::filesystem::path(*dir) / job);
    return session;
  }
  if (!launch.launcher_store_prefix.empty()) {
    // torchrun's agent serves MASTER_PORT already. Its store admits anyone: the job
    // token still guards every connection between ranks (docs/launcher.md).
    session.store = std::make_unique<c10d_store>(launch.master_addr, launch.master_port,
                                                 launch.launcher_store_prefix, until);
    return session;
  }
  if (!launch.job_on_this_host.empty() && launch.master_addr.empty()) return detail::open_private_store(launch, token, until);
  if (launch.master_addr.empty() || launch.master_port == 0)
    throw error(errc::invalid_config,
                "a TCP store needs MASTER_ADDR and MASTER_PORT (or set COLLECTIVES_STORE_DIR for a file store)");
  if (launch.rank == 0) {
    const auto where = detail::store_listen_endpoint(launch);
    const auto busy = [](const error& e) {
      return std::string_view(e.what()).find(detail::port_in_use) != std::string_view::npos;
    };
    try {
      try {
        session.server = std::make_unique<tcp_store_server>(where, token);
      } catch (const error& e) {
        if (busy(e) || where.address().is_unspecified()) throw;
        // MASTER_ADDR is not an address of this host (say, behind NAT): every interface.
        log::info("MASTER_ADDR " + launch.master_addr + " cannot be listened on here (" + e.what() +
                  "); the store listens on every interface");
        session.server = std::make_unique<tcp_store_server>(detail::every_interface(where), token);
      }
    } catch (const error& e) {
      const std::string port = "MASTER_PORT " + std::to_string(launch.master_port);
      if (busy(e))
        throw error(errc::invalid_config,
                    port + detail::port_in_use + " (another job, or an earlier run of this one?); choose a free port");
      throw error(errc::invalid_config, port + " cannot be served on this host: " + e.what());
    }
  }
  session.store = detail::connect_tcp_store(launch, token, until);
  return session;
}

}  // namespace collectives::bootstrap
