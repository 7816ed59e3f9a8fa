// Which local address a rank listens on, and how addresses are written in the store.
#pragma once

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>

#include "../../error.hpp"

namespace collectives::tcp_detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct local_interface {
  std::string name;  // e.g. "eth0"; empty when no interface carries the address
  asio::ip::address address;
};

// "10.0.0.1:4242" or "[fe80::1%eth0]:4242"
inline std::string format_endpoint(const tcp::endpoint& e) {
  const auto a = e.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(e.port());
}

// A port as format_endpoint writes it: decimal digits only, 1 to 65535.
inline std::optional<unsigned short> parse_port(std::string_view digits) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || value == 0 || value > 65535)
    return std::nullopt;
  return static_cast<unsigned short>(value);
}

// A rank's record in the store: its endpoint, then its host (bootstrap::host_fingerprint, hex),
// so that every rank learns the group's hosts with its addresses ("10.0.0.1:4242
// host=0123456789abcdef"). A record without a host (an older writer's, a test's) is
// read for its endpoint alone.
inline std::string format_record(const tcp::endpoint& e, const std::string& host) {
  return format_endpoint(e) + " host=" + host;
}
inline std::string format_record(const tcp::endpoint& e, std::uint64_t host) {
  char hex[17] = {};
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(host));
  return format_record(e, std::string(hex));
}
inline std::string_view endpoint_of_record(std::string_view record) { return record.substr(0, record.find(" host=")); }
inline std::string_view host_of_record(std::string_view record) {
  const auto at = record.find(" host=");
  return at == std::string_view::npos ? std::string_view() : record.substr(at + 6);
}

// The endpoint a rank published with format_endpoint ("10.0.0.1:4242", "[::1]:4242").
// Text no rank writes is errc::protocol_error naming it: the store's value is what
// another process sent.
inline tcp::endpoint parse_endpoint(std::string_view text) {
  const auto unreadable = [text](const std::string& why) {
    return error(errc::protocol_error,
                 "the store holds an unreadable rank address \"" + std::string(text) + "\": " + why);
  };
  if (text.find('\0') != std::string_view::npos) throw unreadable("it contains a NUL byte");
  std::string_view host, port;
  if (text.starts_with('[')) {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) throw unreadable("it is not [IPv6]:PORT");
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw unreadable("it is not HOST:PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) throw unreadable("an IPv6 address must be in brackets");
  }
  const auto port_number = parse_port(port);
  if (!port_number) throw unreadable("the port \"" + std::string(port) + "\" is not a number from 1 to 65535");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(std::string(host), ec);
  if (ec) throw unreadable("\"" + std::string(host) + "\" is not an IP address");
  return {address, *port_number};
}

// An address with brackets stripped ("[::1]" -> "::1"), as users write IPv6 hosts.
inline std::string strip_brackets(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

// Every address of every interface that is up.
template <class Visit>
void for_each_interface_address(Visit&& visit) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    asio::ip::address a;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &in->sin_addr, b.size());
      a = asio::ip::address_v4(b);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &in6->sin6_addr, b.size());
      a = asio::ip::address_v6(b, in6->sin6_scope_id);
    } else {
      continue;
    }
    visit(std::string(i->ifa_name), a);
  }
  freeifaddrs(list);
}

inline std::string interface_of(const asio::ip::address& a) {
  std::string name;
  for_each_interface_address([&](const std::string& n, const asio::ip::address& x) {
    if (name.empty() && x == a) name = n;
  });
  return name;
}

// The address this host uses to reach `host`: the kernel's route, found by
// connecting a UDP socket (which sends nothing).
inline asio::ip::address route_to(const std::string& host) {
  asio::io_context io;
  boost::system::error_code ec;
  asio::ip::udp::resolver resolver(io);
  const auto found = resolver.resolve(strip_brackets(host), "9", ec);
  if (ec || found.empty())
    throw error(errc::invalid_config, "cannot resolve MASTER_ADDR \"" + host + "\": " + ec.message());
  asio::ip::udp::socket probe(io);
  for (const auto& entry : found) {
    probe.close(ec);
    probe.open(entry.endpoint().protocol(), ec);
    if (!ec) probe.connect(entry.endpoint(), ec);
    if (!ec) return probe.local_endpoint().address();
  }
  throw error(errc::invalid_config, "no route from this host to MASTER_ADDR \"" + host + "\": " + ec.message());
}

// The interface to listen on. `wanted` (COLLECTIVES_SOCKET_IFNAME) is an interface
// name or an address; when empty, the interface that routes to the master is used,
// so ranks reach each other the way they reach the store.
inline local_interface choose_interface(const std::string& wanted, const std::string& master) {
  if (wanted.empty()) {
    const auto a = route_to(master);
    return {interface_of(a), a};
  }
  boost::system::error_code ec;
  const auto literal = asio::ip::make_address(strip_brackets(wanted), ec);
  if (!ec) return {interface_of(literal), literal};
  // An interface name: its IPv4 address if it has one, else its first IPv6 one.
  local_interface found;
  for_each_interface_address([&](const std::string& n, const asio::ip::address& a) {
    if (n != wanted) return;
    if (found.name.empty() || (a.is_v4() && !found.address.is_v4())) found = {n, a};
  });
  if (found.name.empty())
    throw error(errc::invalid_config, "COLLECTIVES_SOCKET_IFNAME=" + wanted +
                                          " is neither an address nor an interface of this host that is up");
  return found;
}

}  // namespace collectives::tcp_detail
