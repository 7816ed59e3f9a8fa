// The TCP transport's per-request and per-connection state. Kept apart from the
// transport's logic so each reads on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "../../concepts/transport.hpp"
#include "../detail/matching.hpp"
#include "frame.hpp"

namespace collectives::tcp_detail {

using transport_detail::no_slot;

// A frame waiting to be written; its header lives here so it stays put while the
// write is under way (a deque's elements don't move on push_back or pop_front).
struct outgoing {
  std::uint32_t slot = no_slot;  // no_slot for control frames
  header_bytes header{};
  bool withdrawn = false;        // cancelled before it started
  std::string text{};            // a control frame's payload (a failure's text)
};

// Where a link is in its incoming stream: expecting a header, within a payload, or
// holding a frame whose receive isn't posted yet.
enum class frame_part : std::uint8_t { header, payload, held };

// One authenticated connection to a peer, full duplex: one frame being written and
// one being read at any time. Whether it is still in use is the matching engine's
// link state; a link this rank gave up halfway is left open, so that the peer does
// not take this rank for the one that failed.
struct connection {
  explicit connection(int p, std::shared_ptr<boost::asio::ip::tcp::socket> s) : peer(p), socket(std::move(s)) {}

  int peer;
  std::shared_ptr<boost::asio::ip::tcp::socket> socket;
  bool said_goodbye = false;  // the peer announced that it closes; its end of file is no loss
  bool told_failure = false;  // this rank's first failure is on its way to the peer

  // Sending: frames in order; the front one is being written while `writing`.
  std::deque<outgoing> queue;
  bool writing = false;
  std::size_t written = 0;               // bytes of the front frame written so far

  // Receiving: bytes read ahead into the inbox, taken apart frame by frame.
  std::vector<std::byte> inbox;
  std::size_t inbox_begin = 0, inbox_end = 0;  // the bytes not taken apart yet
  bool reading = false;                        // a read (into the inbox or a receive's buffer) is under way
  bool read_due = false;                       // a read into the inbox waits for the next wait (engine::read_more)
  frame_part part = frame_part::header;        // what the next bytes are
  std::optional<frame_header> held;            // a large early message: stays in the socket until its receive is posted
  std::unique_ptr<boost::asio::steady_timer> held_watch;  // looks for the peer's end while a frame is held
  std::uint64_t remaining = 0;                 // payload bytes of the current frame still to come
};

}  // namespace collectives::tcp_detail
