// The TCP transport's engine: posted operations, frames in and out of each
// connection, and the group's health. It runs on one io_context that only the
// owning thread drives (from wait_for_activity and the destructor); abort() may come
// from any thread and only posts to it.
//
// Sends are written straight from the caller's buffer (header and payload in one
// gather write), at once when posted; what the socket doesn't take goes through the
// reactor. Each link reads ahead into a small inbox, so that small frames cost one
// read for several. A posted receive's payload is copied out of the inbox, or
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
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "connection.hpp"
#include "door.hpp"
#include "frame.hpp"
#include "options.hpp"

namespace collectives::tcp_detail {

namespace asio = boost::asio;
using boost::system::error_code;

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::op_state;
using transport_detail::op_type;

class engine {
 public:
  COLLECTIVES_DECL engine(int rank, int size, engine_limits limits);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  COLLECTIVES_DECL ~engine();

  asio::io_context& io() { return io_; }
  int rank() const { return match_.rank(); }
  int size() const { return match_.size(); }

  // Takes over the mesh's connections and starts reading from each.
  COLLECTIVES_DECL void adopt(std::vector<std::shared_ptr<asio::ip::tcp::socket>> sockets);

  COLLECTIVES_DECL std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data);
  COLLECTIVES_DECL std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into);
  COLLECTIVES_DECL std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink);

  // True once done (the slot is then free); throws the operation's or the group's failure.
  bool test(std::uint32_t& slot) { return match_.finish(slot); }

  // Runs ready handlers. Polls for a short while first, since a peer's answer often
  // comes sooner than a sleeping thread is woken, yielding the core on every turn so
  // that ranks outnumbering the cores still progress; then sleeps in the kernel.
  COLLECTIVES_DECL bool wait_for_activity(deadline until);

  // Starts the reads that wait for the next wait (read_more): for whoever runs the
  // io_context otherwise (the shrink's agreement).
  COLLECTIVES_DECL void start_due_reads();

  COLLECTIVES_DECL void cancel(std::uint32_t& slot) noexcept;

  // Thread-safe: marks the group aborted at once, and tells the peers from the
  // owning thread's next wait.
  COLLECTIVES_DECL void abort();

  // Throws if a peer was lost or the group aborted.
  void throw_if_broken() const { match_.throw_if_broken(); }

  // A peer of a shrunk group that failed during the shrink: no link to it.
  void lose_at_start(int peer, std::string why) { match_.lose(peer, std::move(why)); }

  // This rank's call failed (`what`, its error's text): the reason it gives the peers
  // when it leaves, unless it learned of an earlier failure first.
  void note_own_failure(std::string_view what) { match_.note_own_failure(what); }

  // ---- the door (door.hpp) ------------------------------------------------------

  // Admits visitors at `door` from now on: a notice aborts the group; an agreement's
  // connection aborts it too, and goes to on_agreement, or waits in early_agreements
  // until this rank shrinks. `doors` are every rank's, for notices this rank sends.
  COLLECTIVES_DECL void open_door(std::shared_ptr<asio::ip::tcp::acceptor> door, std::vector<asio::ip::tcp::endpoint> doors,
                                  auth::job_token token, std::chrono::milliseconds handshake_limit);
  // Stops admitting; the door stays open, for a shrunk group to take.
  COLLECTIVES_DECL std::shared_ptr<asio::ip::tcp::acceptor> close_door();
  const std::vector<asio::ip::tcp::endpoint>& doors() const { return doors_; }
  // The shrink attempt that made this group (0: the job's start). A visitor speaks
  // of its own group's: a notice counts only from this group, a shrink only if later,
  // so that a visitor late from an earlier group can't touch this one.
  std::uint32_t epoch() const { return epoch_; }
  void set_epoch(std::uint32_t e) { epoch_ = e; }
  const auth::job_token& token() const { return *token_; }

  using visitor = tcp_detail::visitor;
  std::function<void(visitor)> on_agreement;
  std::vector<visitor> early_agreements;

 private:
  bool open(const connection& link) const { return match_.link(link.peer) == link_state::open; }

  // A receive was posted: a frame held for want of one may go on now.
  COLLECTIVES_DECL std::uint32_t resumed(std::uint32_t slot);

  // ---- sending ----------------------------------------------------------------

  COLLECTIVES_DECL void write_next(connection& link);

  // Writes what is left of the front frame, one write at a time.
  COLLECTIVES_DECL void write_rest(connection& link);
  COLLECTIVES_DECL void wrote_frame(connection& link);

  // ---- receiving --------------------------------------------------------------
  //
  // Each link reads into its inbox as much as the socket holds, so that a small
  // message (header and payload, and often the next frame too) costs one read. The
  // frames are then taken apart from the inbox and their payloads handed to the
  // matching engine. A plain receive's large payload is read straight into the
  // caller's buffer once the inbox has nothing more of it.

  // Takes apart the frames in the inbox until it needs more bytes, or a frame is held.
  COLLECTIVES_DECL void consume(connection& link);

  // A data frame's header: its payload comes next, unless the matching engine holds
  // it back (large, its receive not posted yet), which leaves it in the socket.
  COLLECTIVES_DECL bool start_frame(connection& link, const frame_header& h, bool beyond_limits = false);
  // A held link is read no further, so the peer's end of file would go unseen: it is
  // looked for now and then while the frame is held.
  COLLECTIVES_DECL void watch_held(connection& link);

  // Reads whatever the socket has into the inbox, after what is still unparsed. Asio
  // tries a read at once when it is started, and a link's next frame is rarely there
  // yet when the last one was taken apart: a read between frames that a wait's handler
  // starts waits for the next wait, so that the system call that finds nothing is made
  // while this rank waits anyway, not between the call it ends and the next send.
  COLLECTIVES_DECL void read_more(connection& link);
  COLLECTIVES_DECL void read_into_inbox(connection& link);

  // More of the current payload is needed: straight into a plain receive's buffer
  // when much is left, else through the inbox.
  COLLECTIVES_DECL void read_payload(connection& link);

  // Hands what the inbox holds of the current payload to the matching engine.
  COLLECTIVES_DECL void take_payload(connection& link);

  // ---- failures and farewells -------------------------------------------------

  // A read or write failed: the peer closed after saying goodbye, or it was lost.
  COLLECTIVES_DECL void ended(connection& link, const error_code& ec);

  COLLECTIVES_DECL void close(connection& link, link_state state, std::string why);

  // This rank gave a transfer up halfway: the stream can't be resynchronised, and the
  // caller needs its buffer back now. Cancelling the socket's operations and never
  // continuing them guarantees both; the socket stays open until the transport is
  // destroyed, so the peer goes on to see the failure that caused this one.
  COLLECTIVES_DECL void abandon(connection& link);

  COLLECTIVES_DECL void admit_next_visitor();
  COLLECTIVES_DECL void visited(visit v, std::shared_ptr<asio::ip::tcp::socket> socket);

  // An abort frame, naming the rank that aborted, to every peer still listening; a
  // notice through the door of each peer whose link is out of step.
  COLLECTIVES_DECL void tell_abort();

  // ---- the first failure, told to every peer --------------------------------------
  //
  // A rank tells each peer the first failure it learned of as soon as it learns of it,
  // and, when it leaves, why: that failure, else its own call's, else the exception
  // its program is leaving by. So a survivor names the rank that failed first, not a
  // rank that left because of it. An out-of-step link can't carry a frame: such a peer
  // gets a report through its door, which a leaving rank waits for (a little).

  using failure = transport_detail::matching_engine<>::failure;
  // Its header, and its text cut to what a receiver keeps.
  COLLECTIVES_DECL static std::pair<header_bytes, std::string> failure_frame(const failure& f);
  COLLECTIVES_DECL void tell_first_failure();  // once, as soon as there is one
  COLLECTIVES_DECL void tell_failure(const failure& f);
  COLLECTIVES_DECL void report_through_door(int peer, const failure& f);
  // A failure frame arrived, on a link or through the door.
  COLLECTIVES_DECL void heard(int from, const frame_header& h, std::string text);
  COLLECTIVES_DECL void take_report(int from, std::shared_ptr<asio::ip::tcp::socket> socket);

  // Tells every peer this rank is leaving, so its end of file is no loss, and waits
  // a little for the frames to go out.
  COLLECTIVES_DECL void say_goodbye() noexcept;

  asio::io_context io_{1};
  // Keeps waits blocking until their deadline even with no connection to read from.
  asio::executor_work_guard<asio::io_context::executor_type> keep_waiting_{io_.get_executor()};
  transport_detail::matching_engine<> match_;
  engine_limits limits_;
  std::vector<std::unique_ptr<connection>> links_;  // by peer rank; null for this rank
  bool waiting_ = false;                   // a wait is running handlers (read_more, wrote_frame)
  bool wrote_outside_wait_ = false;        // a frame was written outside a wait: the next wait returns at once
  std::vector<connection*> reads_due_;     // links whose read into the inbox waits for the next wait
  std::shared_ptr<asio::ip::tcp::acceptor> door_;
  bool admitting_ = false;
  std::vector<asio::ip::tcp::endpoint> doors_;
  std::optional<auth::job_token> token_;  // set with the door
  std::chrono::milliseconds handshake_limit_{};
  std::uint32_t epoch_ = 0;
  int reports_under_way_ = 0;  // failure reports knocking at doors
  bool told_first_ = false;    // the first failure went to every peer when it was learned
};

}  // namespace collectives::tcp_detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "engine.ipp"
#endif
