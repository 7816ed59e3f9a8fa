// The address a rank publishes in the store (transport/tcp/address.hpp): every
// endpoint with a port reads back exactly as format_endpoint wrote it; a port of 0 is
// refused; and any text either reads as an endpoint whose port is the number written
// and that reads back unchanged once written again, or is refused with a
// collectives::error (errc::protocol_error, naming the text), never another exception.
//
// Input: a first byte whose low bit picks the mode. 0: family bit, 16 address bytes,
// scope id (4), port (2) of an endpoint to write and read back. 1: the rest is text.
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include <collectives/transport/tcp/address.hpp>

#include "fuzz_check.hpp"

namespace coll = collectives;
namespace tcp = collectives::tcp_detail;
namespace ip = boost::asio::ip;

namespace {

// The endpoint `text` names, or nothing when it is refused the way the contract says.
std::optional<tcp::tcp::endpoint> read(std::string_view text) {
  try {
    return tcp::parse_endpoint(text);
  } catch (const coll::error& e) {
    fuzz_check(e.code() == coll::errc::protocol_error, "a refusal with another code than protocol_error");
    const bool nameable = text.find('\0') == std::string_view::npos;  // what() ends at a NUL
    fuzz_check(!nameable || std::string_view(e.what()).find(text) != std::string_view::npos,
               "a refusal does not name the text");
    return std::nullopt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz_check(false, "a refusal that is not a collectives::error");
  }
  return std::nullopt;
}

void write_and_read_back(const std::uint8_t* data) {
  ip::address address;
  if (data[0] & 1) {
    ip::address_v6::bytes_type bytes;
    std::memcpy(bytes.data(), data + 1, bytes.size());
    std::uint32_t scope = 0;
    std::memcpy(&scope, data + 17, 4);
    // Asio reads a numeric scope back with atoi, so only those up to INT_MAX survive;
    // real interface indexes are small.
    address = ip::address_v6(bytes, scope & 0x7FFFFFFF);
  } else {
    ip::address_v4::bytes_type bytes;
    std::memcpy(bytes.data(), data + 1, bytes.size());
    address = ip::address_v4(bytes);
  }
  std::uint16_t port = 0;
  std::memcpy(&port, data + 21, 2);
  const tcp::tcp::endpoint written(address, port);
  const auto back = read(tcp::format_endpoint(written));
  if (port == 0) return fuzz_check(!back, "a published port 0 was accepted");
  fuzz_check(back && *back == written, "parse_endpoint(format_endpoint(e)) != e");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 1) == 0) {
    if (size >= 24) write_and_read_back(data + 1);
    return 0;
  }
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (const auto e = read(text)) {
    fuzz_check(e->port() != 0, "an address with port 0 was accepted");
    // The port is the number after the last colon, not that number cut to 16 bits.
    auto digits = text.substr(text.rfind(':') + 1);
    while (digits.size() > 1 && digits.front() == '0') digits.remove_prefix(1);
    fuzz_check(digits == std::to_string(e->port()), "the port read is not the number written");
    const auto again = read(tcp::format_endpoint(*e));
    fuzz_check(again && *again == *e, "an accepted address does not read back once written again");
  }
  return 0;
}
