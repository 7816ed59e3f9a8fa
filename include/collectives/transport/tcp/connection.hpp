// The TCP transport's per-request and per-connection state. Kept apart from the
// transport's logic so each reads on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "../../concepts/transport.hpp"
#include "frame.hpp"

namespace collectives::tcp_detail {

inline constexpr std::uint32_t no_slot = UINT32_MAX;

enum class op_type : std::uint8_t { send, recv, recv_reduce };
enum class op_state : std::uint8_t { posted, moving, done, failed };

// One posted send or receive.
struct pending_op {
  op_type type = op_type::send;
  op_state state = op_state::posted;
  int peer = -1;
  message_tag tag{};
  std::span<const std::byte> out{};  // send
  std::span<std::byte> in{};         // recv
  chunk_sink sink{};                 // recv_reduce
  std::size_t bytes = 0;             // what the receiver posted
  std::size_t granule = 1;
  std::exception_ptr failure;
};

// A frame waiting to be written; its header lives here so it stays put while the
// write is under way (a deque's elements don't move on push_back or pop_front).
struct outgoing {
  std::uint32_t slot = no_slot;  // no_slot for control frames
  header_bytes header{};
  bool withdrawn = false;        // cancelled before it started
};

// A message that arrived before its receive was posted; only small ones are kept.
struct early_message {
  message_tag tag;
  std::vector<std::byte> bytes;
};

// Where a link is in its incoming stream: expecting a header, within a payload, or
// holding a frame whose receive isn't posted yet.
enum class frame_part : std::uint8_t { header, payload, held };

// open: in use. departed: the peer said goodbye and closed. lost: the peer vanished
// or broke the stream. abandoned: this rank gave up a transfer halfway (after some
// other failure) and stopped using the link, leaving it open so that the peer does
// not take this rank for the one that failed.
enum class link_status : std::uint8_t { open, departed, lost, abandoned };

// One authenticated connection to a peer, full duplex: one frame being written and
// one being read at any time.
struct connection {
  explicit connection(int p, std::shared_ptr<boost::asio::ip::tcp::socket> s) : peer(p), socket(std::move(s)) {}

  int peer;
  std::shared_ptr<boost::asio::ip::tcp::socket> socket;
  link_status status = link_status::open;
  bool said_goodbye = false;  // the peer announced that it closes; its end of file is no loss
  std::string loss;           // why the link is down

  // Sending: frames in order; the front one is being written while `writing`.
  std::deque<outgoing> queue;
  bool writing = false;
  std::size_t written = 0;               // bytes of the front frame written so far

  // Receiving: bytes read ahead into the inbox, taken apart frame by frame.
  std::vector<std::byte> inbox;
  std::size_t inbox_begin = 0, inbox_end = 0;  // the bytes not taken apart yet
  bool reading = false;                        // a read (into the inbox or a receive's buffer) is under way
  frame_part part = frame_part::header;        // what the next bytes are
  std::deque<std::uint32_t> posted;            // receives not matched yet, in posting order
  std::deque<early_message> early;             // small messages that came first
  std::size_t early_bytes = 0;
  std::optional<frame_header> held;            // a large early message: stays in the socket until its receive is posted
  // The payload under way: for `receiving` (no_slot: dropped), or, when `to_early`,
  // an early message that lands in `arriving`.
  std::uint32_t receiving = no_slot;
  bool to_early = false;
  early_message arriving;
  std::uint64_t remaining = 0;                 // payload bytes still to come
  std::size_t delivered = 0;                   // payload bytes taken so far
};

}  // namespace collectives::tcp_detail
