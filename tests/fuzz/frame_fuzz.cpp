// The TCP frame header: whatever decode accepts is a header our own sender could have
// written, and encodes back to the very bytes it came from; every header built from
// the input's fields survives encode then decode exactly when our sender could have
// written it.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <collectives/transport/tcp/frame.hpp>

#include "fuzz_check.hpp"

namespace tcp = collectives::tcp_detail;

namespace {

// What our sender can write, stated apart from decode's own test (well_formed), so a
// change to either shows: data frames of any tag and length; an abort naming an int
// rank and nothing else; an empty goodbye; a failure naming an int rank, with a flag
// and at most 1024 bytes of text.
bool possible(const tcp::frame_header& h) {
  using tcp::frame_kind;
  if (h.kind == frame_kind::data) return true;
  if (h.kind == frame_kind::failure) return h.tag.call <= 0x7FFFFFFF && h.tag.step <= 1 && h.length <= 1024;
  if (h.length != 0 || h.tag.step != 0) return false;
  if (h.kind == frame_kind::abort) return h.tag.call <= 0x7FFFFFFF;
  return h.kind == frame_kind::goodbye && h.tag.call == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < tcp::header_size) return 0;
  tcp::header_bytes bytes;
  std::memcpy(bytes.data(), data, bytes.size());

  // The bytes as they come off the wire.
  if (const auto h = tcp::decode(bytes)) {
    fuzz_check(possible(*h) && tcp::well_formed(*h), "decode accepted a header our sender never writes");
    fuzz_check(tcp::encode(*h) == bytes, "an accepted header encodes to other bytes");
  }

  // The same bytes read as a header's fields, any kind: one our sender could write
  // goes around unchanged, any other is refused.
  const auto field = [&](std::size_t at, int width) { return tcp::wire::get(bytes.data() + at, width); };
  const tcp::frame_header h{static_cast<tcp::frame_kind>(bytes[0]),
                            {field(8, 8), static_cast<std::uint32_t>(field(4, 4))}, field(16, 8)};
  const auto again = tcp::decode(tcp::encode(h));
  fuzz_check(again.has_value() == possible(h) && possible(h) == tcp::well_formed(h),
             "decode(encode(h)) accepts other headers than those our sender writes");
  if (again) fuzz_check(*again == h, "decode(encode(h)) != h");
  return 0;
}
