// The TCP transport's frame: a fixed 24-byte header, then `length` payload bytes.
// Frames come only from authenticated peers, and still every header is checked
// before anything is done with it: a bad magic or kind ends the connection, and the
// length is held against what the receiver posted, never used to size a buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "../../concepts/transport.hpp"

namespace collectives::tcp_detail {

enum class frame_kind : std::uint8_t {
  data = 1,     // a message: tag and payload
  abort = 2,    // the group was aborted; the tag's call number names the rank that aborted it
  goodbye = 3,  // the sender closes its communicator; the end of file that follows is no loss
  failure = 4,  // the sender's first failure: the call number is the rank it names, the step
                // 1 if that rank is gone (0: it failed in a call), the payload the text
};

// A failure's text is cut to this many bytes, so a receiver can always keep it.
inline constexpr std::size_t max_failure_text = 1024;

struct frame_header {
  frame_kind kind = frame_kind::data;
  message_tag tag{};
  std::uint64_t length = 0;
  friend bool operator==(const frame_header&, const frame_header&) = default;
};

inline constexpr std::size_t header_size = 24;
inline constexpr std::uint32_t frame_magic = 0xC0113C70;  // the high 24 bits; the low 8 bits carry the kind

using header_bytes = std::array<unsigned char, header_size>;

namespace wire {
inline void put(unsigned char* at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get(const unsigned char* at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(at[i]) << (8 * i);
  return v;
}
}  // namespace wire

// magic|kind (4), step (4), call (8), length (8); little-endian on the wire.
inline header_bytes encode(const frame_header& h) {
  header_bytes b{};
  wire::put(b.data(), (frame_magic & 0xFFFFFF00u) | std::uint32_t(h.kind), 4);
  wire::put(b.data() + 4, h.tag.step, 4);
  wire::put(b.data() + 8, h.tag.call, 8);
  wire::put(b.data() + 16, h.length, 8);
  return b;
}

// Whether a sender of ours could have written `h`: a known kind; an abort carries only
// the rank that aborted (an int), a goodbye nothing at all, and a failure a rank, a
// flag and a short text.
inline bool well_formed(const frame_header& h) {
  const bool a_rank = h.tag.call <= std::uint64_t(std::numeric_limits<int>::max());
  switch (h.kind) {
    case frame_kind::data: return true;
    case frame_kind::abort: return h.length == 0 && h.tag.step == 0 && a_rank;
    case frame_kind::goodbye: return h.length == 0 && h.tag == message_tag{};
    case frame_kind::failure: return h.length <= max_failure_text && h.tag.step <= 1 && a_rank;
  }
  return false;
}

// The header, or nothing when the bytes are not one of ours. Every bit of the 24 is
// checked or kept, so a header decode accepts encodes back to the very same bytes.
inline std::optional<frame_header> decode(const header_bytes& b) {
  const auto first = static_cast<std::uint32_t>(wire::get(b.data(), 4));
  if ((first & 0xFFFFFF00u) != (frame_magic & 0xFFFFFF00u)) return std::nullopt;
  const frame_header h{static_cast<frame_kind>(first & 0xFF),
                       {wire::get(b.data() + 8, 8), static_cast<std::uint32_t>(wire::get(b.data() + 4, 4))},
                       wire::get(b.data() + 16, 8)};
  if (!well_formed(h)) return std::nullopt;
  return h;
}

}  // namespace collectives::tcp_detail
