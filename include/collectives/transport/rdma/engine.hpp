// The rdma transport's engine: the matching engine's wire over one libfabric endpoint,
// progressed by the thread that owns the transport (libfabric's manual progress: a
// provider moves data while this engine reads its completion queue).
//
// A message of at most `eager` bytes goes whole in one tagged send, copied into a
// registered send buffer, and its send is complete at once. A larger one is announced:
// the announcement carries its first `eager` bytes and where the rest lies (its
// registration's key and address); the receiver, once it has matched it, reads the
// rest with fi_read straight into the receive's buffer, or, for a fused receive, in
// slices into registered buffers it reduces from while the next slices are read;
// then it says `done`, and the sender's send completes. A user buffer is registered
// once and kept (registration.hpp).
//
// Peers are watched while a rank waits: one on this host through its process (a
// pidfd, which wakes the wait when the process ends), one on another host by a probe
// sent when it has been quiet for a while, which the provider fails if the peer is
// gone.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../../config.hpp"
#include "../../error.hpp"
#include "../../log.hpp"
#include "../detail/matching.hpp"
#include "fabric.hpp"
#include "message.hpp"
#include "registration.hpp"

namespace collectives::rdma_detail {

using transport_detail::cancellation;
using transport_detail::landing;
using transport_detail::link_state;
using transport_detail::no_slot;
using transport_detail::op_state;
using transport_detail::op_type;

struct engine_limits {
  // Larger messages are announced and read. With its header, a message fits the eager
  // size of libfabric's rxm (16 KiB), so that one never waits for its sender's progress.
  std::size_t eager_bytes = 8 * 1024;
  std::size_t receive_buffers = 64;            // posted at once for arriving messages
  std::size_t slice_bytes = 1024 * 1024;       // a fused receive reads and reduces this much at once
  std::size_t read_bytes = 8u << 20;           // the largest single read into a receive's buffer
  std::size_t reads_in_flight = 4;             // per message: a peer that serves reads gets several at once
  std::size_t early_bytes_per_peer = 4u << 20; // small messages kept before their receive is posted
  std::size_t cached_registrations = 64;
  std::chrono::microseconds poll_time{50};     // how long a wait polls before it sleeps
  std::chrono::milliseconds probe_after{200};  // a quiet peer on another host is probed this often
  std::chrono::milliseconds probe_limit{1000};  // a probe not delivered by then: the peer is gone
  std::chrono::milliseconds cancel_limit{2000};  // how long a cancelled receive waits for its reads
  std::chrono::milliseconds withdraw_wait{200};  // how long a cancelled send waits for its reader's word
};

// Where a peer runs, for watching it: `host` names its kernel and process id space
// (the boot id and the pid namespace), so that a pid is watched only where it means
// the same process; containers and network namespaces of one kernel share them.
struct peer_place {
  std::string host;
  long pid = 0;
};

// What the engine adds to each posted operation.
struct wire_state {
  std::uint64_t id = 0;  // a send: its message's id (announced_ has a large one's)
  registration_cache::lease lease;
};

inline constexpr std::uint32_t no_probe = UINT32_MAX;

class engine {
 public:
  COLLECTIVES_DECL engine(int rank, int size, info_ptr provider, engine_limits limits);
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  COLLECTIVES_DECL ~engine();

  int rank() const { return match_.rank(); }
  int size() const { return match_.size(); }
  const endpoint& fabric() const { return *ep_; }
  const engine_limits& limits() const { return limits_; }
  std::string address() const { return ep_->name(); }
  const registration_cache::counters& registrations() const { return cache_->counts(); }
  bool keeps_registrations() const { return cache_->keeps_registrations(); }

  // Every rank's address and place, in rank order (this rank's among them).
  COLLECTIVES_DECL void connect(const std::vector<std::string>& addresses, const std::vector<peer_place>& places,
                      const std::string& this_place);

  COLLECTIVES_DECL std::uint32_t post_send(int peer, message_tag tag, std::span<const std::byte> data);
  COLLECTIVES_DECL std::uint32_t post_recv(int peer, message_tag tag, std::span<std::byte> into);
  COLLECTIVES_DECL std::uint32_t post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink);
  bool test(std::uint32_t& slot) { return match_.finish(slot); }
  COLLECTIVES_DECL bool wait_for_activity(deadline until);
  COLLECTIVES_DECL void cancel(std::uint32_t& slot) noexcept;
  COLLECTIVES_DECL void abort();
  void note_own_failure(std::string_view what) { match_.note_own_failure(what); }
  // A rank of a shrunk group that failed during the shrink: lost from the start.
  void lose_at_start(int peer, std::string why) { match_.lose(peer, std::move(why)); }

 private:
  using matching = transport_detail::matching_engine<wire_state>;
  using failure = matching::failure;

  // What a completion refers to: every posted libfabric operation's context.
  enum class work : std::uint8_t { receive, send, read };
  struct context {
    fi_context2 fi{};  // first: the provider's (FI_CONTEXT, FI_CONTEXT2)
    work what = work::receive;
    int peer = -1;
    std::uint32_t index = 0;  // its buffer, or its slice of a read
  };

  // Registered buffers of one size: the receive buffers and the send buffers.
  struct buffer_pool {
    std::size_t each = 0;
    std::vector<std::unique_ptr<std::byte[]>> blocks;
    std::vector<registration> regs;
    std::vector<std::byte*> at;
    std::vector<void*> desc;
    std::vector<std::uint32_t> free;
    std::deque<context> contexts;  // stable addresses
  };

  // A message taken out of order, or held for want of its receive: its bytes, copied.
  struct arrival {
    std::uint64_t seq = 0;
    std::vector<std::byte> bytes;
  };

  // The rest of an announced message being read from its sender.
  struct reading {
    bool active = false;
    bool abandoned = false;  // its receive was cancelled: reads end, nothing is delivered
    header from{};           // the announcement
    std::uint32_t slot = no_slot;
    bool fused = false;
    std::size_t issued = 0, landed = 0;  // bytes read asked for, bytes handed over (the first ones included)
    int in_flight = 0;
    registration_cache::lease into;      // a plain receive's buffer
    struct slice {
      context ctx;
      std::size_t offset = 0, length = 0;
      bool busy = false, arrived = false;
    };
    std::vector<slice> slices = std::vector<slice>(4);  // engine_limits::reads_in_flight
    std::unique_ptr<std::byte[]> bounce;  // a fused receive's slices, registered
    registration bounce_reg;
  };

  // An ordered message waiting to be sent: behind an announced one that its receiver
  // has not read yet, as behind a large frame in a stream, so that a send cancelled
  // before it moved is never delivered.
  struct queued {
    std::uint32_t index;
    std::size_t length;
    std::uint64_t id;
    bool withdrawn;
  };

  struct peer_state {
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    std::uint64_t sent_seq = 0, next_seq = 0;
    std::deque<queued> queue;  // ordered messages not sent yet
    struct unsent {
      std::uint32_t index;
      std::size_t length;
    };
    std::deque<unsent> backlog;  // sends the provider had no room for yet, in order
    int announcing = 0;        // announced messages sent and not yet read
    std::deque<arrival> waiting;  // ordered messages not yet taken, by seq
    bool taking_waiting = false;  // take_waiting() runs: a call within it returns at once
    reading in;
    clock::time_point heard{}, probed{};
    std::uint32_t probe = no_probe;  // the send buffer of a probe not yet delivered
    int pidfd = -1;  // a process on this host
    bool told_failure = false;
    bool said_goodbye = false;  // its goodbye came (perhaps behind messages not taken yet)
    bool saw_goodbye = false;   // it says this rank's goodbye came
  };

  // ---- buffers and sending --------------------------------------------------------
  COLLECTIVES_DECL void grow(buffer_pool& pool, std::size_t count, std::uint64_t access);
  COLLECTIVES_DECL std::uint32_t take_send_buffer();
  // Sends `length` bytes of send buffer `index` to `peer` (after what waits for the
  // provider, in order).
  COLLECTIVES_DECL void send(int peer, std::uint32_t index, std::size_t length);
  COLLECTIVES_DECL bool post_one_send(int peer, std::uint32_t index, std::size_t length);
  // A message taken on arrival; returns its send buffer.
  COLLECTIVES_DECL std::uint32_t send_control(int peer, header h, std::string_view text = {});
  // An ordered message (its header's seq is set as it leaves).
  COLLECTIVES_DECL void send_in_order(int peer, std::uint32_t index, std::size_t length, std::uint64_t id);
  COLLECTIVES_DECL void send_queued(int peer);
  COLLECTIVES_DECL void post_receive(std::uint32_t index);

  // ---- progress -------------------------------------------------------------------
  COLLECTIVES_DECL bool progress();
  COLLECTIVES_DECL bool is_news(const fi_cq_tagged_entry& e) const;  // a message taken on arrival
  COLLECTIVES_DECL void completed(const fi_cq_tagged_entry& e);
  COLLECTIVES_DECL void failed(const fi_cq_err_entry& e, const std::string& why);
  COLLECTIVES_DECL void arrived(int peer, std::span<const std::byte> message);
  // Takes the peer's ordered messages that are next, while it can.
  COLLECTIVES_DECL void take_waiting(int peer);
  // Takes one ordered message; false if it must wait (held for want of its receive).
  COLLECTIVES_DECL bool take(int peer, const header& h, std::span<const std::byte> payload);
  COLLECTIVES_DECL void take_news(int peer, const header& h, std::span<const std::byte> payload);

  // ---- announced messages ---------------------------------------------------------
  COLLECTIVES_DECL void start_reading(int peer, const header& h, std::span<const std::byte> first);
  COLLECTIVES_DECL void read_more(int peer);
  COLLECTIVES_DECL void slice_read(int peer, std::uint32_t which);
  COLLECTIVES_DECL void finish_reading(int peer, outcome how);
  COLLECTIVES_DECL void answered(int peer, const header& h);
  COLLECTIVES_DECL void answer(int peer, std::uint64_t id, outcome how);  // `done`

  // ---- health ---------------------------------------------------------------------
  COLLECTIVES_DECL void lost(int peer, std::string why);
  COLLECTIVES_DECL void watch_peers();
  COLLECTIVES_DECL bool process_ended(int peer, std::chrono::milliseconds within) const;
  COLLECTIVES_DECL void tell_abort();
  COLLECTIVES_DECL void tell_first_failure();
  COLLECTIVES_DECL void tell_failure(const failure& f);
  // Gives up the endpoint: every transfer stops touching memory, every link is broken.
  COLLECTIVES_DECL void shut_endpoint(const std::string& why);
  COLLECTIVES_DECL void say_goodbye() noexcept;
  bool open(int peer) const { return match_.link(peer) == link_state::open; }
  std::string rank_name(int peer) const { return "rank " + std::to_string(peer); }

  // ---- ranks of one group in one process ------------------------------------------
  //
  // libfabric's shm provider reaches an endpoint of the same process through that
  // endpoint's own memory, which closing it frees: a rank of a group whose ranks are
  // threads of one process keeps its endpoint, and the buffers posted to it, until
  // the last of them has closed its transport.
  struct parked {
    std::unique_ptr<endpoint> ep;
    buffer_pool receives;  // after ep: its registrations close before the domain
    parked(std::unique_ptr<endpoint> e, buffer_pool r) : ep(std::move(e)), receives(std::move(r)) {}
    parked(parked&&) noexcept = default;
    parked& operator=(parked&&) noexcept = default;
    ~parked() {
      if (ep) ep->shut();  // first: no more arrivals into the buffers
    }
  };
  COLLECTIVES_DECL void park_until_group_closed();

  matching match_;
  engine_limits limits_;
  std::string group_;     // every rank's address: the same text on every rank of the group
  int ranks_here_ = 1;    // ranks of the group in this process
  std::unique_ptr<endpoint> ep_;
  std::unique_ptr<registration_cache> cache_;  // after ep_: its registrations close first
  bool ep_open_ = true;
  buffer_pool receives_, sends_;
  std::vector<peer_state> peers_;
  std::vector<fi_cq_tagged_entry> batch_;  // progress()'s completions, reused
  std::vector<std::pair<fi_cq_err_entry, std::string>> failures_;  // its failed ones, and why, reused
  int sends_in_flight_ = 0;
  std::vector<std::uint32_t> unposted_receives_;
  std::map<std::uint64_t, std::uint32_t> announced_;  // an announced send's id: its slot
  std::set<std::uint64_t> withdrawn_;                 // withdrawals not yet answered
  std::uint64_t next_id_ = 1;
  int wake_fd_ = -1;  // an eventfd abort() writes to, so that a sleeping wait wakes
  std::atomic<bool> abort_to_tell_{false};
  bool told_abort_ = false;
  bool told_first_ = false;
  bool leaving_ = false;  // saying goodbye: every send is counted until it is out
  clock::time_point last_watch_{};
};

}  // namespace collectives::rdma_detail

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "engine.ipp"
#endif
