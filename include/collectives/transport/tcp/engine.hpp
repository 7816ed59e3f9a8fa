// The TCP transport's engine: posted operations, frames in and out of each
// connection, and the group's health. It runs on one io_context that only the
// owning thread drives (from wait_for_activity and the destructor); abort() may come
// from any thread and only posts to it.
//
// Sends are written straight from the caller's buffer (header and payload in one
// gather write). Each link reads ahead into a small inbox, so that small frames cost
// one read for several. A posted receive's payload is copied out of the inbox, or
// read straight into the caller's buffer when much of it is left, or, when fused,
// reduced piece by piece as it arrives. A frame that arrives first is kept if it is
// small; a large one waits (in the socket) until its receive is posted, so no length
// from the wire ever sizes an allocation.
//
// Payloads move in loops of single reads and writes, not Asio's composed operations,
// and every step first checks that its link is still in use: a cancelled transfer
// then stops touching the caller's buffer at once, without closing the connection.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>

#include "../../error.hpp"
#include "../../log.hpp"
#include "connection.hpp"
#include "frame.hpp"

namespace collectives::tcp_detail {

namespace asio = boost::asio;
using boost::system::error_code;

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::op_state;
using transport_detail::op_type;

struct engine_limits {
  transport_detail::early_limits early{};      // frames kept in memory before their receive is posted
  std::size_t piece_bytes = 256 * 1024;        // a fused receive reduces at most this much at once
  std::size_t inbox_bytes = 64 * 1024;         // what one read takes in, headers and small payloads
  std::chrono::microseconds poll_time{50};     // how long a wait polls before it sleeps
};

class engine {
 public:
  engine(int rank, int size, engine_limits limits) : match_(rank, size, limits.early), limits_(limits) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() { say_goodbye(); }

  asio::io_context& io() { return io_; }
  int rank() const { return match_.rank(); }
  int size() const { return match_.size(); }

  // Takes over the mesh's connections and starts reading from each.
  void adopt(std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets) {
    links_.resize(sockets.size());
    for (std::size_t p = 0; p < sockets.size(); ++p)
      if (sockets[p]) links_[p] = std::make_unique<connection>(int(p), std::move(sockets[p]));
    for (auto& l : links_)
      if (l) consume(*l);
  }

  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    const std::uint32_t slot = match_.post_send(peer, tag, data);
    connection& link = *links_[std::size_t(peer)];
    link.queue.push_back({slot, encode({frame_kind::data, tag, data.size()})});
    write_next(link);
    return slot;
  }

  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    return resumed(match_.post_recv(peer, tag, into));
  }

  std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    return resumed(match_.post_recv_reduce(peer, tag, bytes, granule, sink));
  }

  // True once done (the slot is then free); throws the operation's or the group's failure.
  bool test(std::uint32_t& slot) { return match_.finish(slot); }

  // Runs ready handlers. Polls for a short while first, since a peer's answer often
  // comes sooner than a sleeping thread is woken, yielding the core on every turn so
  // that ranks outnumbering the cores still progress; then sleeps in the kernel.
  bool wait_for_activity(deadline until) {
    if (match_.broken()) return true;
    const auto poll_until = std::min(until, clock::now() + limits_.poll_time);
    do {
      if (io_.poll() > 0) return true;
      std::this_thread::yield();
    } while (clock::now() < poll_until);
    const bool ran = io_.run_one_until(until) > 0;
    const bool more = io_.poll() > 0;  // counts: a caller told "nothing ran" would sleep on what did
    return ran || more || match_.broken();
  }

  void cancel(std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    const std::uint32_t cancelled = slot;
    const cancellation c = match_.cancel(slot);
    connection& link = *links_[std::size_t(c.peer)];
    if (c.type == op_type::send && c.state == op_state::posted) {
      for (auto& frame : link.queue)
        if (frame.slot == cancelled) frame.withdrawn = true;
    } else if (c.type == op_type::send && c.state == op_state::moving) {
      for (auto& frame : link.queue)
        if (frame.slot == cancelled) frame.slot = no_slot;
      abandon(link);
    } else if (c.mid_message) {
      abandon(link);
    }
  }

  // Thread-safe: marks the group aborted at once, and tells the peers from the
  // owning thread's next wait.
  void abort() {
    match_.note_abort(rank());
    asio::post(io_, [this] { tell_abort(); });
  }

  // Throws if a peer was lost or the group aborted.
  void throw_if_broken() const { match_.throw_if_broken(); }

 private:
  bool open(const connection& link) const { return match_.link(link.peer) == link_state::open; }

  // A receive was posted: a frame held for want of one may go on now.
  std::uint32_t resumed(std::uint32_t slot) {
    connection& link = *links_[std::size_t(match_.at(slot).peer)];
    if (link.part == frame_part::held && open(link)) {
      const frame_header h = *link.held;
      if (start_frame(link, h)) consume(link);
    }
    return slot;
  }

  // ---- sending ----------------------------------------------------------------

  void write_next(connection& link) {
    while (!link.writing && !link.queue.empty() && link.queue.front().withdrawn) link.queue.pop_front();
    if (link.writing || link.queue.empty() || !open(link)) return;
    const outgoing& frame = link.queue.front();
    if (frame.slot != no_slot) match_.at(frame.slot).state = op_state::moving;
    link.writing = true;
    link.written = 0;
    write_rest(link);
  }

  // Writes what is left of the front frame, one write at a time.
  void write_rest(connection& link) {
    const outgoing& frame = link.queue.front();
    std::span<const std::byte> payload;
    if (frame.slot != no_slot) payload = match_.at(frame.slot).out;
    std::array<asio::const_buffer, 2> rest{};
    if (link.written < header_size) {
      rest[0] = asio::buffer(frame.header.data() + link.written, header_size - link.written);
      rest[1] = asio::buffer(payload.data(), payload.size());
    } else {
      rest[0] = asio::buffer(payload.data() + (link.written - header_size), payload.size() - (link.written - header_size));
    }
    link.socket->async_write_some(rest, [this, &link, total = header_size + payload.size()](const error_code& ec, std::size_t n) {
      if (!open(link)) return;
      if (ec) return ended(link, ec);
      link.written += n;
      if (link.written < total) return write_rest(link);
      link.writing = false;
      const std::uint32_t slot = link.queue.front().slot;
      link.queue.pop_front();
      if (slot != no_slot) match_.at(slot).state = op_state::done;
      write_next(link);
    });
  }

  // ---- receiving --------------------------------------------------------------
  //
  // Each link reads into its inbox as much as the socket holds, so that a small
  // message (header and payload, and often the next frame too) costs one read. The
  // frames are then taken apart from the inbox and their payloads handed to the
  // matching engine. A plain receive's large payload is read straight into the
  // caller's buffer once the inbox has nothing more of it.

  // Takes apart the frames in the inbox until it needs more bytes, or a frame is held.
  void consume(connection& link) {
    while (open(link)) {
      if (link.part == frame_part::held) return;  // resumes when its receive is posted
      if (link.part == frame_part::payload) {
        take_payload(link);
        if (link.remaining > 0) return read_payload(link);
        link.part = frame_part::header;
        continue;
      }
      if (link.inbox_end - link.inbox_begin < header_size) return read_more(link);
      header_bytes bytes;
      std::memcpy(bytes.data(), link.inbox.data() + link.inbox_begin, header_size);
      link.inbox_begin += header_size;
      const auto h = decode(bytes);
      if (!h) return close(link, link_state::lost, "rank " + std::to_string(link.peer) + " sent a malformed frame header");
      if (h->kind == frame_kind::abort) {
        // The frame names the rank that aborted first.
        match_.note_abort(h->tag.call < std::uint64_t(size()) ? int(h->tag.call) : link.peer);
      } else if (h->kind == frame_kind::goodbye) {
        link.said_goodbye = true;
      } else {
        start_frame(link, *h);
      }
    }
  }

  // A data frame's header: its payload comes next, unless the matching engine holds
  // it back (large, its receive not posted yet), which leaves it in the socket.
  bool start_frame(connection& link, const frame_header& h) {
    if (match_.begin_message(link.peer, h.tag, h.length) == landing::held) {
      link.held = h;
      link.part = frame_part::held;
      return false;
    }
    link.held.reset();
    link.part = frame_part::payload;
    link.remaining = h.length;
    // A fused receive reduces from the inbox in whole elements, in pieces this large.
    if (const std::uint32_t slot = match_.receiving(link.peer); slot != no_slot && match_.at(slot).type == op_type::recv_reduce) {
      const std::size_t g = match_.at(slot).granule;
      const std::size_t piece = std::max(g, limits_.piece_bytes / g * g);
      if (link.inbox.size() < piece) link.inbox.resize(piece);
    }
    return true;
  }

  // Reads whatever the socket has into the inbox, after what is still unparsed.
  void read_more(connection& link) {
    if (link.reading) return;
    const std::size_t unparsed = link.inbox_end - link.inbox_begin;
    if (unparsed != 0 && link.inbox_begin != 0)
      std::memmove(link.inbox.data(), link.inbox.data() + link.inbox_begin, unparsed);
    link.inbox_begin = 0;
    link.inbox_end = unparsed;
    if (link.inbox.size() < limits_.inbox_bytes) link.inbox.resize(limits_.inbox_bytes);
    link.reading = true;
    link.socket->async_read_some(asio::buffer(link.inbox.data() + unparsed, link.inbox.size() - unparsed),
                                 [this, &link](const error_code& ec, std::size_t n) {
      link.reading = false;
      if (!open(link)) return;
      if (ec) return ended(link, ec);
      link.inbox_end += n;
      consume(link);
    });
  }

  // More of the current payload is needed: straight into a plain receive's buffer
  // when much is left, else through the inbox.
  void read_payload(connection& link) {
    const std::span<std::byte> into = match_.direct_destination(link.peer);
    const bool direct = !into.empty() && link.inbox_begin == link.inbox_end && link.remaining >= limits_.inbox_bytes / 2;
    if (!direct) return read_more(link);
    if (link.reading) return;
    link.reading = true;
    link.socket->async_read_some(asio::buffer(into.data(), into.size()), [this, &link](const error_code& ec, std::size_t n) {
      link.reading = false;
      if (!open(link)) return;  // abandoned: the buffer is the caller's again
      if (ec) return ended(link, ec);
      link.remaining -= n;
      match_.delivered_directly(link.peer, n);
      consume(link);
    });
  }

  // Hands what the inbox holds of the current payload to the matching engine.
  void take_payload(connection& link) {
    const std::size_t n = std::min<std::uint64_t>(link.inbox_end - link.inbox_begin, link.remaining);
    if (n == 0) return;
    match_.deliver(link.peer, {link.inbox.data() + link.inbox_begin, n});
    link.inbox_begin += n;
    link.remaining -= n;
  }

  // ---- failures and farewells -------------------------------------------------

  // A read or write failed: the peer closed after saying goodbye, or it was lost.
  void ended(connection& link, const error_code& ec) {
    if (!open(link)) return;
    if (link.said_goodbye && ec == asio::error::eof)
      return close(link, link_state::departed, "rank " + std::to_string(link.peer) + " closed its communicator");
    const std::string how = ec == asio::error::eof ? "closed the connection without saying goodbye (did it exit or crash?)"
                                                   : "broke the connection (" + ec.message() + ")";
    close(link, link_state::lost, "lost rank " + std::to_string(link.peer) + ": it " + how);
  }

  void close(connection& link, link_state state, std::string why) {
    if (!open(link)) return;
    if (state == link_state::departed) {
      match_.depart(link.peer, std::move(why));
    } else if (match_.lose(link.peer, std::move(why)) && match_.aborted_by() < 0) {
      log::warn(match_.who() + match_.link_story(link.peer));
    }
    error_code ignored;
    link.socket->close(ignored);
  }

  // This rank gave a transfer up halfway: the stream can't be resynchronised, and the
  // caller needs its buffer back now. Cancelling the socket's operations and never
  // continuing them guarantees both; the socket stays open until the transport is
  // destroyed, so the peer goes on to see the failure that caused this one.
  void abandon(connection& link) {
    if (!open(link)) return;
    match_.break_link(link.peer, "the connection to rank " + std::to_string(link.peer) +
                                     " is out of step: a transfer was cancelled halfway after an earlier failure; build a new communicator");
    error_code ignored;
    link.socket->cancel(ignored);
  }

  // An abort frame, naming the rank that aborted, to every peer still listening.
  void tell_abort() {
    const int by = match_.aborted_by();
    for (auto& l : links_)
      if (l && open(*l)) {
        l->queue.push_back({no_slot, encode({frame_kind::abort, {std::uint64_t(by), 0}, 0})});
        write_next(*l);
      }
  }

  // Tells every peer this rank is leaving, so its end of file is no loss, and waits
  // a little for the frames to go out.
  void say_goodbye() noexcept {
    try {
      // A rank that leaves an aborted group passes the abort on first, so that a peer
      // reading this stream learns of it before the goodbye, whichever way it heard.
      if (match_.aborted_by() >= 0) tell_abort();
      for (auto& l : links_)
        if (l && open(*l)) {
          l->queue.push_back({no_slot, encode({frame_kind::goodbye, {}, 0})});
          write_next(*l);
        }
      const deadline until = clock::now() + std::chrono::seconds{2};
      auto flushed = [&] {
        return std::all_of(links_.begin(), links_.end(), [&](const auto& l) { return !l || !open(*l) || l->queue.empty(); });
      };
      while (!flushed() && clock::now() < until) io_.run_one_until(until);
      for (auto& l : links_)
        if (l && (open(*l) || match_.link(l->peer) == link_state::broken)) {
          error_code ignored;
          l->socket->shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
          l->socket->close(ignored);
        }
    } catch (...) {
      // Leaving anyway; the peers will see an end of file.
    }
  }

  asio::io_context io_{1};
  // Keeps waits blocking until their deadline even with no connection to read from.
  asio::executor_work_guard<asio::io_context::executor_type> keep_waiting_{io_.get_executor()};
  transport_detail::matching_engine<> match_;
  engine_limits limits_;
  std::vector<std::unique_ptr<connection>> links_;  // by peer rank; null for this rank
};

}  // namespace collectives::tcp_detail
