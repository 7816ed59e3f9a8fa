// The conformance suite's messages: bytes that say which message they are, the sizes
// that matter to a transport, and a sink that records what a fused receive hands over.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include <collectives/concepts/transport.hpp>

namespace conformance {

namespace coll = collectives;

using bytes = std::vector<std::byte>;

inline constexpr coll::message_tag tag(std::uint32_t step) { return {7, step}; }

inline std::span<const std::byte> out(const bytes& b) { return b; }
inline std::span<std::byte> in(bytes& b) { return b; }

// A message larger than the transport takes in early (or 300 kB where it takes any).
template <class T>
std::size_t large_message_bytes() {
  const std::size_t early = coll::traits_of<T>().early_message_bytes;
  return early >= (std::size_t(1) << 30) ? 300'000 : std::max<std::size_t>(300'000, 2 * early + 1000);
}

// Large enough that a sender is still at it when its receiver stops reading: more than
// loopback TCP's socket buffers hold, let alone a FIFO of slots.
inline constexpr std::size_t halfway_message_bytes = 16u << 20;

// Bytes that say which message they belong to, so that a swap or a stale byte shows.
inline bytes pattern(std::size_t size, unsigned seed) {
  bytes v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = std::byte((i * 131 + seed * 29 + (i >> 8) * 7 + 1) & 0xff);
  return v;
}

inline constexpr std::byte untouched{0xee};
inline bytes blank(std::size_t size) { return bytes(size, untouched); }

inline bool all_untouched(std::span<const std::byte> v) {
  for (std::byte b : v)
    if (b != untouched) return false;
  return true;
}

// Records the pieces a fused receive hands over, and rebuilds the message from them.
struct piece_log {
  std::size_t granule = 1;
  bytes message;
  std::size_t covered = 0, pieces = 0, misplaced = 0, partial = 0;

  static void consume(void* context, std::size_t offset, std::span<const std::byte> piece) {
    auto& log = *static_cast<piece_log*>(context);
    ++log.pieces;
    log.partial += offset % log.granule != 0 || piece.size() % log.granule != 0;
    if (offset != log.covered || offset + piece.size() > log.message.size()) {
      ++log.misplaced;
      return;
    }
    std::memcpy(log.message.data() + offset, piece.data(), piece.size());
    log.covered += piece.size();
  }
};

}  // namespace conformance
