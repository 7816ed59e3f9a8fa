// Small helpers the bootstrap tests share: a temporary directory, a free port, and
// whether this host has an IPv6 loopback.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <collectives/concepts/transport.hpp>

namespace test_support {

using namespace std::chrono_literals;
using collectives::clock;
using tcp = boost::asio::ip::tcp;

// A fresh directory under the system's temporary directory, removed afterwards.
class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "collectives-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A port nothing listens on right now (the kernel's pick of an ephemeral port).
inline std::uint16_t free_port(const char* address = "127.0.0.1") {
  boost::asio::io_context io;
  tcp::acceptor probe(io, tcp::endpoint(boost::asio::ip::make_address(address), 0));
  return probe.local_endpoint().port();
}

inline bool ipv6_loopback_available() {
  boost::asio::io_context io;
  tcp::acceptor probe(io);
  boost::system::error_code ec;
  probe.open(tcp::v6(), ec);
  if (!ec) probe.bind(tcp::endpoint(boost::asio::ip::make_address("::1"), 0), ec);
  return !ec;
}

inline std::chrono::milliseconds since(clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
}

}  // namespace test_support
