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

struct engine_limits {
  std::size_t eager_limit = 64 * 1024;         // early frames up to this size are kept in memory
  std::size_t early_capacity = 4 * 1024 * 1024;  // at most this much per connection
  std::size_t piece_bytes = 256 * 1024;        // a fused receive reduces at most this much at once
  std::size_t inbox_bytes = 64 * 1024;         // what one read takes in, headers and small payloads
  std::chrono::microseconds poll_time{50};     // how long a wait polls before it sleeps
};

class engine {
 public:
  engine(int rank, int size, engine_limits limits) : rank_(rank), size_(size), limits_(limits) {}
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() { say_goodbye(); }

  asio::io_context& io() { return io_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Takes over the mesh's connections and starts reading from each.
  void adopt(std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets) {
    links_.resize(sockets.size());
    for (std::size_t p = 0; p < sockets.size(); ++p)
      if (sockets[p]) links_[p] = std::make_unique<connection>(int(p), std::move(sockets[p]));
    for (auto& l : links_)
      if (l) consume(*l);
  }

  std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    connection& link = link_to(peer);
    const std::uint32_t slot = take(op_type::send, peer, tag, data.size());
    ops_[slot]->out = data;
    link.queue.push_back({slot, encode({frame_kind::data, tag, data.size()})});
    write_next(link);
    return slot;
  }

  std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    const std::uint32_t slot = take(op_type::recv, peer, tag, into.size());
    ops_[slot]->in = into;
    match(link_to(peer), slot);
    return slot;
  }

  std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
    const std::uint32_t slot = take(op_type::recv_reduce, peer, tag, bytes);
    ops_[slot]->sink = sink;
    ops_[slot]->granule = std::max<std::size_t>(granule, 1);
    match(link_to(peer), slot);
    return slot;
  }

  // True once done (the slot is then free); throws the operation's or the group's failure.
  bool test(std::uint32_t& slot) {
    pending_op& o = *ops_[slot];
    if (o.state == op_state::done) {
      release(slot);
      return true;
    }
    if (o.state == op_state::failed) std::rethrow_exception(o.failure);
    throw_if_broken();
    const connection& link = *links_[std::size_t(o.peer)];
    if (link.status == link_status::departed)
      throw error(errc::peer_lost, who() + link.loss + " while this rank still had a message " +
                                       (o.type == op_type::send ? "for" : "from") + " it");
    if (link.status == link_status::abandoned) throw error(errc::protocol_error, who() + link.loss);
    return false;
  }

  // Runs ready handlers. Polls for a short while first, since a peer's answer often
  // comes sooner than a sleeping thread is woken, yielding the core on every turn so
  // that ranks outnumbering the cores still progress; then sleeps in the kernel.
  bool wait_for_activity(deadline until) {
    if (broken()) return true;
    const auto poll_until = std::min(until, clock::now() + limits_.poll_time);
    do {
      if (io_.poll() > 0) return true;
      std::this_thread::yield();
    } while (clock::now() < poll_until);
    const bool ran = io_.run_one_until(until) > 0;
    io_.poll();
    return ran || broken();
  }

  void cancel(std::uint32_t& slot) noexcept {
    if (slot == no_slot) return;
    pending_op& o = *ops_[slot];
    connection& link = *links_[std::size_t(o.peer)];
    if (o.state == op_state::posted && o.type == op_type::send) {
      for (auto& frame : link.queue)
        if (frame.slot == slot) frame.withdrawn = true;
    } else if (o.state == op_state::posted) {
      link.posted.erase(std::remove(link.posted.begin(), link.posted.end(), slot), link.posted.end());
    } else if (o.state == op_state::moving) {
      // Halfway through a frame: the stream can't be resynchronised, and the caller
      // needs its buffer back now. Cancelling the socket's operations and never
      // continuing them guarantees both; the socket stays open until the transport
      // is destroyed, so the peer goes on to see the failure that caused this one.
      for (auto& frame : link.queue)
        if (frame.slot == slot) frame.slot = no_slot;
      if (link.receiving == slot) link.receiving = no_slot;
      abandon(link);
    }
    release(slot);
  }

  // Thread-safe: marks the group aborted at once, and tells the peers from the
  // owning thread's next wait.
  void abort() {
    int none = -1;
    aborted_by_.compare_exchange_strong(none, rank_);
    asio::post(io_, [this] { tell_abort(); });
  }

  // Throws if a peer was lost or the group aborted.
  void throw_if_broken() const {
    if (const int by = aborted_by_.load(); by >= 0)
      throw error(errc::aborted, who() + "the group was aborted by " + (by == rank_ ? "this rank" : "rank " + std::to_string(by)));
    if (first_lost_ >= 0) throw error(errc::peer_lost, who() + links_[std::size_t(first_lost_)]->loss);
  }

 private:
  bool broken() const { return aborted_by_.load() >= 0 || first_lost_ >= 0; }
  std::string who() const { return "rank " + std::to_string(rank_) + ": "; }

  connection& link_to(int peer) {
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw error(errc::invalid_peer, who() + "peer " + std::to_string(peer) + " is not another rank of a group of " +
                                          std::to_string(size_));
    return *links_[std::size_t(peer)];
  }

  std::uint32_t take(op_type type, int peer, message_tag tag, std::size_t bytes) {
    if (free_.empty()) {
      ops_.push_back(std::make_unique<pending_op>());
      free_.push_back(std::uint32_t(ops_.size() - 1));
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    *ops_[slot] = pending_op{};
    ops_[slot]->type = type;
    ops_[slot]->peer = peer;
    ops_[slot]->tag = tag;
    ops_[slot]->bytes = bytes;
    return slot;
  }
  void release(std::uint32_t& slot) {
    free_.push_back(slot);
    slot = no_slot;
  }
  void fail(pending_op& o, errc code, const std::string& why) {
    o.state = op_state::failed;
    o.failure = std::make_exception_ptr(error(code, who() + why));
  }

  // ---- sending ----------------------------------------------------------------

  void write_next(connection& link) {
    while (!link.writing && !link.queue.empty() && link.queue.front().withdrawn) link.queue.pop_front();
    if (link.writing || link.queue.empty() || link.status != link_status::open) return;
    const outgoing& frame = link.queue.front();
    if (frame.slot != no_slot) ops_[frame.slot]->state = op_state::moving;
    link.writing = true;
    link.written = 0;
    write_rest(link);
  }

  // Writes what is left of the front frame, one write at a time.
  void write_rest(connection& link) {
    const outgoing& frame = link.queue.front();
    std::span<const std::byte> payload;
    if (frame.slot != no_slot) payload = ops_[frame.slot]->out;
    std::array<asio::const_buffer, 2> rest{};
    if (link.written < header_size) {
      rest[0] = asio::buffer(frame.header.data() + link.written, header_size - link.written);
      rest[1] = asio::buffer(payload.data(), payload.size());
    } else {
      rest[0] = asio::buffer(payload.data() + (link.written - header_size), payload.size() - (link.written - header_size));
    }
    link.socket->async_write_some(rest, [this, &link, total = header_size + payload.size()](const error_code& ec, std::size_t n) {
      if (link.status != link_status::open) return;
      if (ec) return ended(link, ec);
      link.written += n;
      if (link.written < total) return write_rest(link);
      link.writing = false;
      const std::uint32_t slot = link.queue.front().slot;
      link.queue.pop_front();
      if (slot != no_slot) ops_[slot]->state = op_state::done;
      write_next(link);
    });
  }

  // ---- receiving --------------------------------------------------------------
  //
  // Each link reads into its inbox as much as the socket holds, so that a small
  // message (header and payload, and often the next frame too) costs one read. The
  // frames are then taken apart from the inbox. A plain receive's large payload is
  // read straight into the caller's buffer once the inbox has nothing more of it.

  // Takes apart the frames in the inbox until it needs more bytes, or a frame is held.
  void consume(connection& link) {
    while (link.status == link_status::open) {
      if (link.part == frame_part::held) return;  // resumes when its receive is posted
      if (link.part == frame_part::payload) {
        take_payload(link);
        if (link.remaining > 0) return read_payload(link);
        end_payload(link);
        continue;
      }
      if (link.inbox_end - link.inbox_begin < header_size) return read_more(link);
      header_bytes bytes;
      std::memcpy(bytes.data(), link.inbox.data() + link.inbox_begin, header_size);
      link.inbox_begin += header_size;
      const auto h = decode(bytes);
      if (!h) return close(link, link_status::lost, "rank " + std::to_string(link.peer) + " sent a malformed frame header");
      if (h->kind == frame_kind::abort) {
        int none = -1;  // the frame names the rank that aborted first
        const auto by = h->tag.call < std::uint64_t(size_) ? int(h->tag.call) : link.peer;
        aborted_by_.compare_exchange_strong(none, by);
      } else if (h->kind == frame_kind::goodbye) {
        link.said_goodbye = true;
      } else {
        route(link, *h);
      }
    }
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
      if (link.status != link_status::open) return;
      if (ec) return ended(link, ec);
      link.inbox_end += n;
      consume(link);
    });
  }

  // More of the current payload is needed: straight into a plain receive's buffer
  // when much is left, else through the inbox.
  void read_payload(connection& link) {
    const bool direct = link.receiving != no_slot && ops_[link.receiving]->type == op_type::recv &&
                        ops_[link.receiving]->state == op_state::moving && link.inbox_begin == link.inbox_end &&
                        link.remaining >= limits_.inbox_bytes / 2;
    if (!direct) return read_more(link);
    if (link.reading) return;
    pending_op& o = *ops_[link.receiving];
    link.reading = true;
    link.socket->async_read_some(asio::buffer(o.in.data() + link.delivered, link.remaining),
                                 [this, &link](const error_code& ec, std::size_t n) {
      link.reading = false;
      if (link.status != link_status::open) return;  // abandoned: the buffer is the caller's again
      if (ec) return ended(link, ec);
      link.delivered += n;
      link.remaining -= n;
      consume(link);
    });
  }

  // A data frame's header has arrived: hand it to its receive, keep it, or hold it.
  void route(connection& link, const frame_header& h) {
    for (auto it = link.posted.begin(); it != link.posted.end(); ++it)
      if (ops_[*it]->tag == h.tag) {
        const std::uint32_t slot = *it;
        link.posted.erase(it);
        return start_payload(link, slot, h.length);
      }
    if (h.length <= limits_.eager_limit && link.early_bytes + h.length <= limits_.early_capacity) {
      link.early_bytes += h.length;
      link.arriving = {h.tag, std::vector<std::byte>(h.length)};
      link.to_early = true;
      link.part = frame_part::payload;
      link.remaining = h.length;
      link.delivered = 0;
      return;
    }
    link.held = h;  // taking frames apart resumes when the matching receive is posted
    link.part = frame_part::held;
  }

  // A receive was posted: take an early message, resume a held one, or wait.
  void match(connection& link, std::uint32_t slot) {
    pending_op& o = *ops_[slot];
    for (auto it = link.early.begin(); it != link.early.end(); ++it)
      if (it->tag == o.tag) {
        early_message m = std::move(*it);
        link.early.erase(it);
        link.early_bytes -= m.bytes.size();
        if (m.bytes.size() != o.bytes) return fail_size(o, link, m.bytes.size());
        deliver(o, 0, m.bytes);
        if (o.state != op_state::failed) o.state = op_state::done;
        return;
      }
    if (link.part == frame_part::held && link.held->tag == o.tag) {
      const std::uint64_t length = link.held->length;
      link.held.reset();
      start_payload(link, slot, length);
      return consume(link);
    }
    link.posted.push_back(slot);
  }

  // A message of another size than its receive posted: the receive fails, naming both.
  void fail_size(pending_op& o, const connection& link, std::uint64_t got) {
    fail(o, got > o.bytes ? errc::message_truncated : errc::buffer_size_mismatch,
         "rank " + std::to_string(link.peer) + " sent " + std::to_string(got) + " bytes where " +
             std::to_string(o.bytes) + " were expected; do all ranks pass the same counts?");
  }

  // Bytes for a receive: copied, or handed to the fused reduction's sink.
  void deliver(pending_op& o, std::size_t offset, std::span<const std::byte> bytes) {
    if (o.type == op_type::recv) {
      if (!bytes.empty()) std::memcpy(o.in.data() + offset, bytes.data(), bytes.size());
      return;
    }
    try {
      o.sink(offset, bytes);  // runs the user's op, which may throw
    } catch (...) {
      o.state = op_state::failed;
      o.failure = std::current_exception();
    }
  }

  // The payload of a frame for `slot` comes next. A size that doesn't match what
  // was posted fails the receive, and the payload is dropped to keep the stream whole.
  void start_payload(connection& link, std::uint32_t slot, std::uint64_t length) {
    pending_op& o = *ops_[slot];
    link.part = frame_part::payload;
    link.remaining = length;
    link.delivered = 0;
    link.to_early = false;
    link.receiving = no_slot;
    if (length != o.bytes) return fail_size(o, link, length);
    o.state = op_state::moving;
    link.receiving = slot;
    // A fused receive reduces from the inbox in whole elements, in pieces this large.
    if (o.type == op_type::recv_reduce) {
      const std::size_t piece = std::max(o.granule, limits_.piece_bytes / o.granule * o.granule);
      if (link.inbox.size() < piece) link.inbox.resize(piece);
    }
  }

  // Moves what the inbox holds of the current payload to where it belongs: an early
  // message, the receive's buffer, its sink (whole elements only; a split one waits
  // for the rest), or nowhere, when the receive failed or is gone.
  void take_payload(connection& link) {
    std::size_t n = std::min<std::uint64_t>(link.inbox_end - link.inbox_begin, link.remaining);
    const std::byte* at = link.inbox.data() + link.inbox_begin;
    if (link.to_early) {
      if (n != 0) std::memcpy(link.arriving.bytes.data() + link.delivered, at, n);
    } else if (link.receiving != no_slot && ops_[link.receiving]->state == op_state::moving) {
      pending_op& o = *ops_[link.receiving];
      if (o.type == op_type::recv_reduce) n -= n % o.granule;
      if (n != 0) deliver(o, link.delivered, {at, n});
    }
    link.inbox_begin += n;
    link.delivered += n;
    link.remaining -= n;
  }

  void end_payload(connection& link) {
    link.part = frame_part::header;
    if (link.to_early) {
      link.to_early = false;
      const message_tag tag = link.arriving.tag;
      link.early.push_back(std::move(link.arriving));
      link.arriving = {};
      // Its receive may have been posted while the bytes were on their way.
      for (auto it = link.posted.begin(); it != link.posted.end(); ++it)
        if (ops_[*it]->tag == tag) {
          const std::uint32_t slot = *it;
          link.posted.erase(it);
          match(link, slot);
          break;
        }
      return;
    }
    if (link.receiving != no_slot && ops_[link.receiving]->state == op_state::moving)
      ops_[link.receiving]->state = op_state::done;
    link.receiving = no_slot;
  }

  // ---- failures and farewells -------------------------------------------------

  // A read or write failed: the peer closed after saying goodbye, or it was lost.
  void ended(connection& link, const error_code& ec) {
    if (link.status != link_status::open) return;
    if (link.said_goodbye && ec == asio::error::eof)
      return close(link, link_status::departed, "rank " + std::to_string(link.peer) + " closed its communicator");
    const std::string how = ec == asio::error::eof ? "closed the connection without saying goodbye (did it exit or crash?)"
                                                   : "broke the connection (" + ec.message() + ")";
    close(link, link_status::lost, "lost rank " + std::to_string(link.peer) + ": it " + how);
  }

  void close(connection& link, link_status status, std::string why) {
    if (link.status != link_status::open) return;
    link.status = status;
    link.loss = std::move(why);
    if (status == link_status::lost && first_lost_ < 0) {
      first_lost_ = link.peer;
      if (aborted_by_.load() < 0) log::warn(who() + link.loss);
    }
    error_code ignored;
    link.socket->close(ignored);
  }

  void abandon(connection& link) {
    if (link.status != link_status::open) return;
    link.status = link_status::abandoned;
    link.loss = "the connection to rank " + std::to_string(link.peer) +
                " is out of step: a transfer was cancelled halfway after an earlier failure; build a new communicator";
    error_code ignored;
    link.socket->cancel(ignored);
  }

  // Tells every peer this rank is leaving, so its end of file is no loss, and waits
  // a little for the frames to go out.
  // An abort frame, naming the rank that aborted, to every peer still listening.
  void tell_abort() {
    const int by = aborted_by_.load();
    for (auto& l : links_)
      if (l && l->status == link_status::open) {
        l->queue.push_back({no_slot, encode({frame_kind::abort, {std::uint64_t(by), 0}, 0})});
        write_next(*l);
      }
  }

  void say_goodbye() noexcept {
    try {
      // A rank that leaves an aborted group passes the abort on first, so that a peer
      // reading this stream learns of it before the goodbye, whichever way it heard.
      if (aborted_by_.load() >= 0) tell_abort();
      for (auto& l : links_)
        if (l && l->status == link_status::open) {
          l->queue.push_back({no_slot, encode({frame_kind::goodbye, {}, 0})});
          write_next(*l);
        }
      const deadline until = clock::now() + std::chrono::seconds{2};
      auto flushed = [&] {
        return std::all_of(links_.begin(), links_.end(),
                           [](const auto& l) { return !l || l->status != link_status::open || l->queue.empty(); });
      };
      while (!flushed() && clock::now() < until) io_.run_one_until(until);
      for (auto& l : links_)
        if (l && (l->status == link_status::open || l->status == link_status::abandoned)) {
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
  int rank_, size_;
  engine_limits limits_;
  std::vector<std::unique_ptr<connection>> links_;  // by peer rank; null for this rank
  std::vector<std::unique_ptr<pending_op>> ops_;
  std::vector<std::uint32_t> free_;
  std::atomic<int> aborted_by_{-1};
  int first_lost_ = -1;
};

}  // namespace collectives::tcp_detail
