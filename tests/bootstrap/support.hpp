// Small helpers the bootstrap tests share: a temporary directory, a free port,
// whether this host has an IPv6 loopback, and what the process writes to stderr.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <collectives/concepts/transport.hpp>
#include <doctest/doctest.h>

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

// Sends what this process writes to stderr into a string until finish().
class stderr_capture {
 public:
  stderr_capture() {
    int ends[2];
    REQUIRE(::pipe(ends) == 0);
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(ends[1], 2);
    ::close(ends[1]);
    reader_ = std::thread([this, from = ends[0]] {
      char buffer[4096];
      for (ssize_t n; (n = ::read(from, buffer, sizeof buffer)) > 0;) text_.append(buffer, static_cast<std::size_t>(n));
      ::close(from);
    });
  }
  ~stderr_capture() { finish(); }
  std::string finish() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      ::dup2(saved_, 2);  // closes the pipe's last write end, so the reader sees its end
      ::close(saved_);
      saved_ = -1;
      reader_.join();
    }
    return text_;
  }

 private:
  int saved_ = -1;
  std::thread reader_;
  std::string text_;
};

}  // namespace test_support
