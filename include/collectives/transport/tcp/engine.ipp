// The TCP engine's member functions (engine.hpp): inline in header-only use, compiled
// once into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <thread>
#include <vector>

#include "engine.hpp"

namespace collectives::tcp_detail {

engine::engine(int rank, int size, engine_limits limits) : match_(rank, size, limits.early), limits_(limits) {}

engine::~engine() { say_goodbye(); }

void engine::adopt(std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets) {
  links_.resize(sockets.size());
  for (std::size_t p = 0; p < sockets.size(); ++p)
    if (sockets[p]) {
      error_code ignored;  // a socket left blocking is only written through the reactor
      sockets[p]->non_blocking(true, ignored);
      links_[p] = std::make_unique<connection>(int(p), std::move(sockets[p]));
    }
  for (auto& l : links_)
    if (l) consume(*l);
}

std::uint32_t engine::post_send(int peer, message_tag tag, std::span<const std::byte> data) {
  const std::uint32_t slot = match_.post_send(peer, tag, data);
  connection& link = *links_[std::size_t(peer)];
  link.queue.push_back({slot, encode({frame_kind::data, tag, data.size()})});
  write_next(link);
  return slot;
}

std::uint32_t engine::post_recv(int peer, message_tag tag, std::span<std::byte> into) {
  return resumed(match_.post_recv(peer, tag, into));
}

std::uint32_t engine::post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink) {
  return resumed(match_.post_recv_reduce(peer, tag, bytes, granule, sink));
}

bool engine::wait_for_activity(deadline until) {
  if (match_.broken()) return true;
  if (std::exchange(wrote_outside_wait_, false)) return true;  // a send done when posted: activity since the last wait
  start_due_reads();
  waiting_ = true;
  struct done_waiting {
    bool& waiting;
    ~done_waiting() { waiting = false; }
  } guard{waiting_};
  const auto poll_until = std::min(until, clock::now() + limits_.poll_time);
  do {
    if (io_.poll() > 0) return true;
    std::this_thread::yield();
  } while (clock::now() < poll_until);
  const bool ran = io_.run_one_until(until) > 0;
  const bool more = io_.poll() > 0;  // counts: a caller told "nothing ran" would sleep on what did
  return ran || more || match_.broken();
}

void engine::start_due_reads() {
  for (connection* link : reads_due_) {  // a started read's handler runs later, in a poll
    link->read_due = false;
    read_into_inbox(*link);
  }
  reads_due_.clear();
}

void engine::cancel(std::uint32_t& slot) noexcept {
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

void engine::abort() {
  match_.note_abort(rank());
  asio::post(io_, [this] { tell_abort(); });
}

std::uint32_t engine::resumed(std::uint32_t slot) {
  connection& link = *links_[std::size_t(match_.at(slot).peer)];
  if (link.part == frame_part::held && open(link)) {
    const frame_header h = *link.held;
    if (start_frame(link, h)) consume(link);
  }
  return slot;
}

void engine::write_next(connection& link) {
  while (!link.writing && !link.queue.empty() && link.queue.front().withdrawn) link.queue.pop_front();
  if (link.writing || link.queue.empty() || !open(link)) return;
  const outgoing& frame = link.queue.front();
  if (frame.slot != no_slot) match_.at(frame.slot).state = op_state::moving;
  link.writing = true;
  link.written = 0;
  write_rest(link);
}

void engine::write_rest(connection& link) {
  const outgoing& frame = link.queue.front();
  std::span<const std::byte> payload = std::as_bytes(std::span(frame.text));
  if (frame.slot != no_slot) payload = match_.at(frame.slot).out;
  const std::size_t total = header_size + payload.size();
  std::array<asio::const_buffer, 2> rest{};
  if (link.written < header_size) {
    rest[0] = asio::buffer(frame.header.data() + link.written, header_size - link.written);
    rest[1] = asio::buffer(payload.data(), payload.size());
  } else {
    rest[0] = asio::buffer(payload.data() + (link.written - header_size), payload.size() - (link.written - header_size));
  }
  // A frame's first write goes at once (the socket does not block, adopt()), so that
  // a small frame is done when it is posted, with no handler to wait for. What the
  // socket did not take, or a failure, goes through the reactor, which reports it.
  if (link.written == 0) {
    error_code now;
    link.written = link.socket->write_some(rest, now);
    if (link.written == total) return wrote_frame(link);
    if (link.written > 0) return write_rest(link);
  }
  link.socket->async_write_some(rest, [this, &link, total](const error_code& ec, std::size_t n) {
    if (!open(link)) return;
    if (ec) return ended(link, ec);
    link.written += n;
    if (link.written < total) return write_rest(link);
    wrote_frame(link);
  });
}

void engine::wrote_frame(connection& link) {
  link.writing = false;
  const std::uint32_t slot = link.queue.front().slot;
  link.queue.pop_front();
  if (slot != no_slot) match_.at(slot).state = op_state::done;
  if (!waiting_) wrote_outside_wait_ = true;
  write_next(link);
}

void engine::consume(connection& link) {
  while (open(link)) {
    if (link.part == frame_part::held) return;  // resumes when its receive is posted
    if (link.part == frame_part::payload) {
      take_payload(link);
      if (link.remaining > 0) return read_payload(link);
      link.part = frame_part::header;
      continue;
    }
    const std::size_t unparsed = link.inbox_end - link.inbox_begin;
    if (unparsed < header_size) return read_more(link);
    header_bytes bytes;
    std::memcpy(bytes.data(), link.inbox.data() + link.inbox_begin, header_size);
    const auto h = decode(bytes);
    if (!h) return close(link, link_state::lost, "rank " + std::to_string(link.peer) + " sent a malformed frame header");
    // A failure's short text is taken whole from the inbox.
    if (h->kind == frame_kind::failure && unparsed < header_size + h->length) return read_more(link);
    link.inbox_begin += header_size;
    if (h->kind == frame_kind::failure) {
      const char* text = reinterpret_cast<const char*>(link.inbox.data() + link.inbox_begin);
      link.inbox_begin += h->length;
      heard(link.peer, *h, std::string(text, h->length));
    } else if (h->kind == frame_kind::abort) {
      // The frame names the rank that aborted first.
      match_.note_abort(h->tag.call < std::uint64_t(size()) ? int(h->tag.call) : link.peer);
    } else if (h->kind == frame_kind::goodbye) {
      link.said_goodbye = true;
    } else {
      start_frame(link, *h);
    }
  }
}

bool engine::start_frame(connection& link, const frame_header& h, bool beyond_limits) {
  if (match_.begin_message(link.peer, h.tag, h.length, beyond_limits) == landing::held) {
    link.held = h;
    link.part = frame_part::held;
    watch_held(link);
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

// The peer's end shows in poll() as POLLRDHUP even behind unread bytes. Once it has
// come, everything the peer sent is in the socket, so the held frame is taken in whole
// (beyond the early limits: no more will come) and the link reads on to the goodbye or
// the end of file; a frame cut short means the peer left in the middle of it.
void engine::watch_held(connection& link) {
  if (!link.held_watch) link.held_watch = std::make_unique<asio::steady_timer>(io_);
  link.held_watch->expires_after(std::chrono::milliseconds(20));
  link.held_watch->async_wait([this, &link](const error_code& ec) {
    if (ec || link.part != frame_part::held || !open(link)) return;
    pollfd p{link.socket->native_handle(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) != 1 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return watch_held(link);
    int unread = 0;
    const std::size_t in_inbox = link.inbox_end - link.inbox_begin;
    if (::ioctl(p.fd, FIONREAD, &unread) != 0 || in_inbox + std::size_t(std::max(unread, 0)) < link.held->length)
      return close(link, link_state::lost,
                   "lost rank " + std::to_string(link.peer) +
                       ": it closed the connection in the middle of a message (did it exit or crash?)");
    if (start_frame(link, *link.held, true)) consume(link);
  });
}

void engine::read_more(connection& link) {
  if (link.reading || link.read_due) return;
  if (!waiting_ || link.part != frame_part::header) return read_into_inbox(link);  // within a frame: the rest is on its way
  link.read_due = true;
  reads_due_.push_back(&link);
}

void engine::read_into_inbox(connection& link) {
  if (link.reading || !open(link)) return;
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

void engine::read_payload(connection& link) {
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

void engine::take_payload(connection& link) {
  const std::size_t n = std::min<std::uint64_t>(link.inbox_end - link.inbox_begin, link.remaining);
  if (n == 0) return;
  match_.deliver(link.peer, {link.inbox.data() + link.inbox_begin, n});
  link.inbox_begin += n;
  link.remaining -= n;
}

void engine::ended(connection& link, const error_code& ec) {
  if (!open(link)) return;
  if (link.said_goodbye && ec == asio::error::eof)
    return close(link, link_state::departed, "rank " + std::to_string(link.peer) + " closed its communicator");
  const std::string how = ec == asio::error::eof ? "closed the connection without saying goodbye (did it exit or crash?)"
                                                 : "broke the connection (" + ec.message() + ")";
  close(link, link_state::lost, "lost rank " + std::to_string(link.peer) + ": it " + how);
}

void engine::close(connection& link, link_state state, std::string why) {
  if (!open(link)) return;
  if (state == link_state::departed) {
    match_.depart(link.peer, std::move(why));
  } else if (match_.lose(link.peer, std::move(why)) && match_.aborted_by() < 0) {
    log::warn(match_.who() + match_.link_story(link.peer));
  }
  error_code ignored;
  link.socket->close(ignored);
  if (state == link_state::lost) tell_first_failure();
}

void engine::abandon(connection& link) {
  if (!open(link)) return;
  match_.break_link(link.peer, "the connection to rank " + std::to_string(link.peer) +
                                   " is out of step: a transfer was cancelled halfway after an earlier failure; build a new communicator");
  link.told_failure = false;  // a failure frame queued behind the transfer will never go
  error_code ignored;
  link.socket->cancel(ignored);
}

void engine::open_door(std::shared_ptr<asio::ip::tcp::acceptor> door, std::vector<asio::ip::tcp::endpoint> doors,
                       auth::job_token token, std::chrono::milliseconds handshake_limit) {
  door_ = std::move(door);
  doors_ = std::move(doors);
  token_ = std::move(token);
  handshake_limit_ = handshake_limit;
  admitting_ = true;
  admit_next_visitor();
}

std::shared_ptr<asio::ip::tcp::acceptor> engine::close_door() {
  admitting_ = false;
  error_code ignored;
  if (door_) door_->cancel(ignored);
  io_.poll();  // the cancelled accept's handler
  return std::move(door_);
}

void engine::admit_next_visitor() {
  if (!admitting_ || !door_ || !door_->is_open()) return;
  auto socket = std::make_shared<asio::ip::tcp::socket>(io_);
  door_->async_accept(*socket, [this, socket](const error_code& ec) {
    if (!admitting_) return;
    if (!ec) {
      auth::async_admit(socket, *token_, auth::purpose::shrink, [this, socket](auth::outcome o) {
        if (o.accepted) return visited(visit::of(o.hello), socket);
        log::debug(match_.who() + "turned away a visitor at its door: " + o.why);
      }, handshake_limit_);
    }
    admit_next_visitor();
  });
}

void engine::visited(visit v, std::shared_ptr<asio::ip::tcp::socket> socket) {
  error_code ignored;
  const bool this_group = v.kind == visit_kind::agree ? v.attempt > epoch_ : v.attempt == epoch_;
  if (v.rank < 0 || v.rank >= size() || v.rank == rank() || !this_group) {
    log::debug(match_.who() + "turned away a visitor from rank " + std::to_string(v.rank) + " of another group");
    return void(socket->close(ignored));
  }
  if (v.kind == visit_kind::report) return take_report(v.rank, std::move(socket));
  if (!match_.aborted()) {
    match_.note_abort(v.rank);
    log::debug(match_.who() + "rank " + std::to_string(v.rank) +
               (v.kind == visit_kind::agree ? " began to shrink the group" : " revoked the group"));
  }
  if (v.kind != visit_kind::agree) return void(socket->close(ignored));
  if (on_agreement) on_agreement({v.rank, v.attempt, std::move(socket)});
  else early_agreements.push_back({v.rank, v.attempt, std::move(socket)});
}

void engine::tell_abort() {
  const int by = match_.aborted_by();
  for (auto& l : links_) {
    if (!l) continue;
    if (open(*l)) {
      l->queue.push_back({no_slot, encode({frame_kind::abort, {std::uint64_t(by), 0}, 0})});
      write_next(*l);
    } else if (by == rank() && match_.link(l->peer) == link_state::broken && std::size_t(l->peer) < doors_.size()) {
      knock(io_, doors_[std::size_t(l->peer)], *token_, {visit_kind::notice, rank(), epoch_}, handshake_limit_,
            [](std::shared_ptr<asio::ip::tcp::socket> socket, bool) {
              if (socket) close_quietly(*socket);
            });
    }
  }
}

std::pair<header_bytes, std::string> engine::failure_frame(const failure& f) {
  std::string text = f.why.substr(0, max_failure_text);
  return {encode({frame_kind::failure, {std::uint64_t(f.rank), f.gone ? 1u : 0u}, text.size()}), std::move(text)};
}

void engine::tell_first_failure() {
  if (told_first_ || !match_.first_failure()) return;
  told_first_ = true;
  tell_failure(*match_.first_failure());
}

void engine::tell_failure(const failure& f) {
  const auto [header, text] = failure_frame(f);
  for (auto& l : links_) {
    if (!l || l->told_failure || l->peer == f.rank) continue;
    if (open(*l)) {
      l->told_failure = true;
      l->queue.push_back({no_slot, header, false, text});
      write_next(*l);
    } else if (match_.link(l->peer) == link_state::broken) {
      l->told_failure = true;
      report_through_door(l->peer, f);
    }
  }
}

void engine::report_through_door(int peer, const failure& f) {
  if (std::size_t(peer) >= doors_.size() || !token_) return;
  const auto [header, text] = failure_frame(f);
  auto frame = std::make_shared<std::string>(reinterpret_cast<const char*>(header.data()), header_size);
  *frame += text;
  ++reports_under_way_;
  knock(io_, doors_[std::size_t(peer)], *token_, {visit_kind::report, rank(), epoch_}, handshake_limit_,
        [this, frame](std::shared_ptr<asio::ip::tcp::socket> socket, bool) {
          if (!socket) return void(--reports_under_way_);
          asio::async_write(*socket, asio::buffer(*frame), [this, socket, frame](const error_code& ec, std::size_t) {
            if (ec) return void(--reports_under_way_);
            auto answer = std::make_shared<char>();
            asio::async_read(*socket, asio::buffer(answer.get(), 1), [this, socket, answer](const error_code&, std::size_t) {
              --reports_under_way_;  // taken, or the door closed: either way, done
              close_quietly(*socket);
            });
          });
        });
}

void engine::take_report(int from, std::shared_ptr<asio::ip::tcp::socket> socket) {
  auto header = std::make_shared<header_bytes>();
  asio::async_read(*socket, asio::buffer(*header), [this, from, socket, header](const error_code& ec, std::size_t) {
    const auto h = ec ? std::nullopt : decode(*header);
    if (!h || h->kind != frame_kind::failure) return close_quietly(*socket);
    auto text = std::make_shared<std::string>(h->length, '\0');
    asio::async_read(*socket, asio::buffer(*text), [this, from, socket, h = *h, text](const error_code& e, std::size_t) {
      if (e) return close_quietly(*socket);
      heard(from, h, std::move(*text));
      static const char taken = 1;
      asio::async_write(*socket, asio::buffer(&taken, 1), [socket](const error_code&, std::size_t) { close_quietly(*socket); });
    });
  });
}

void engine::heard(int from, const frame_header& h, std::string text) {
  match_.hear(from, {int(h.tag.call), h.tag.step == 1, std::move(text)});
  tell_first_failure();
}

// Closing a socket that still holds unread bytes resets the connection, and the reset
// throws away what the kernel had not sent yet: a failure this rank reported just
// before leaving would never reach the peer, which would then blame this rank. So
// before the sockets close, their sent bytes get until `until` to leave (the peer
// acknowledges them, or its end of file says it reads no more), and what came in is
// read and dropped.
COLLECTIVES_DECL void settle_before_close(const std::vector<int>& sockets, deadline until) noexcept {
  std::vector<int> sending = sockets;
  char scratch[4096];
  for (;;) {
    for (int fd : sockets)
      while (::recv(fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0) {
      }
    std::erase_if(sending, [](int fd) {
      int unsent = 0;
      return ::ioctl(fd, SIOCOUTQ, &unsent) != 0 || unsent == 0;
    });
    if (sending.empty() || clock::now() >= until) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void engine::say_goodbye() noexcept {
  try {
    start_due_reads();
    // A rank that leaves an aborted group passes the abort on first, so that a peer
    // reading this stream learns of it before the goodbye, whichever way it heard;
    // one that leaves after a failure says why.
    if (match_.aborted_by() >= 0) tell_abort();
    else if (const auto why = match_.reason_to_leave()) tell_failure(*why);
    for (auto& l : links_)
      if (l && open(*l)) {
        l->queue.push_back({no_slot, encode({frame_kind::goodbye, {}, 0})});
        write_next(*l);
      }
    // An aborted group waits for nothing: its peers learn of the abort anyway, and a
    // rank that shrank must not keep the survivors waiting at its new door.
    const deadline until = clock::now() + (match_.aborted() ? std::chrono::seconds{0} : std::chrono::seconds{2});
    auto flushed = [&] {
      return reports_under_way_ == 0 &&
             std::all_of(links_.begin(), links_.end(), [&](const auto& l) { return !l || !open(*l) || l->queue.empty(); });
    };
    io_.poll();
    while (!flushed() && clock::now() < until) io_.run_one_until(until);
    std::vector<int> closing;
    for (auto& l : links_)
      if (l && (open(*l) || match_.link(l->peer) == link_state::broken)) {
        error_code ignored;
        l->socket->shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
        closing.push_back(l->socket->native_handle());
      }
    settle_before_close(closing, until);
    for (auto& l : links_)
      if (l && (open(*l) || match_.link(l->peer) == link_state::broken)) {
        error_code ignored;
        l->socket->close(ignored);
      }
  } catch (...) {
    // Leaving anyway; the peers will see an end of file.
  }
}

}  // namespace collectives::tcp_detail
