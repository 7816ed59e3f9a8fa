// What the rdma engine's messages carry. Every message between two ranks is one tagged
// send of at most header_size + eager bytes, into one of the receiver's posted buffers;
// its libfabric tag is the sender's rank, so the completion names the peer.
//
// Ordered kinds (a message's bytes, a rendezvous's announcement, goodbye) carry a
// sequence number per pair of ranks and are taken in that order, whatever order the
// provider completes them in. The others are answers and news, taken on arrival, so a
// large message held back for want of its receive never holds them up.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace collectives::rdma_detail {

enum class kind : std::uint8_t {
  // ordered
  eager = 1,  // a whole message, its bytes after the header
  announce,   // a large message: its first bytes after the header; the rest is read at addr/key
  goodbye,    // the sender closed its communicator; nothing follows
  // taken on arrival
  done,       // the announced message `id` was read (or refused, or dropped) and may be let go
  withdraw,   // the sender gave up the announced message `id`: its memory is no longer readable
  abort,      // the group is aborted, first by rank `bytes`
  failure,    // the first failure the sender knows: rank `bytes`, gone if `flag`, text after the header
  probe,      // nothing: a send that fails if the receiver is gone
  goodbye_seen,  // the sender's goodbye came: it may close now
};

inline bool is_ordered(kind k) { return k == kind::eager || k == kind::announce || k == kind::goodbye; }

// done's flag: how the announced message ended (for logs: the sender's send is done either way).
enum class outcome : std::uint8_t { read = 0, dropped = 1 };

// Ranks of one job run one build on one kind of host: the header is sent as it lies in memory.
static_assert(std::endian::native == std::endian::little, "rdma: the message header assumes a little-endian host");

struct header {
  kind what = kind::eager;
  std::uint8_t flag = 0;
  std::uint16_t reserved = 0;
  std::uint32_t step = 0;
  std::uint64_t call = 0;
  std::uint64_t seq = 0;    // ordered kinds: the sender's count of ordered messages to this peer
  std::uint64_t bytes = 0;  // eager, announce: the message's length; abort, failure: a rank
  std::uint64_t id = 0;     // announce, done, withdraw: which announced message
  std::uint64_t addr = 0;   // announce: where the message lies in the sender's memory
  std::uint64_t key = 0;    // announce: the key to read it with
};
inline constexpr std::size_t header_size = sizeof(header);
static_assert(header_size == 56);

inline header read_header(const std::byte* at) {
  header h;
  std::memcpy(&h, at, header_size);
  return h;
}
inline void write_header(std::byte* at, const header& h) { std::memcpy(at, &h, header_size); }

}  // namespace collectives::rdma_detail
