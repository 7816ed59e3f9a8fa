// Fault injection: faulty<T> wraps any transport and, from a seed, makes its traffic
// late, reordered across peers, stalled, silenced or killed, so that code above the
// transport (the collectives, an engine's own loop) can be tried against the faults a
// cluster has, and a failure can be replayed from its seed.
//
//   collectives::fault_plan plan{.seed = 7, .delay_chance = 0.3};
//   collectives::communicator<collectives::faulty<collectives::inproc>> comm(
//       collectives::faulty<collectives::inproc>(group.transport(rank), plan));
//
// Benign faults, after which every message still arrives:
//   delay    a post is held back for up to max_delay before the transport sees it.
//            Each (peer, direction) keeps its order, so messages of one (peer, tag)
//            stream are never reordered; streams to different peers overtake each other.
//   stall    the rank sleeps for up to max_stall before a post.
// Harmful faults, each at this rank's n-th post (1 is the first):
//   stall_at         the rank sleeps long_stall there, as a rank the OS or a GC stopped;
//   silence_link_at  the link to a peer the seed picks goes silent: from then on no
//                    message between the two is posted, as a link that drops everything;
//   kill_at          the rank dies: SIGKILL when kill_process (a rank that is a process),
//                    else every later operation throws errc::aborted.
// The decisions follow from the seed and the order of posts alone; when messages are
// released depends on time, so a replay makes the same faults, not the same schedule.
#pragma once

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../concepts/transport.hpp"
#include "../error.hpp"

namespace collectives {

struct fault_plan {
  std::uint64_t seed = 0;
  // Benign.
  double delay_chance = 0;  // of each post
  std::chrono::microseconds max_delay{2000};
  double stall_chance = 0;  // of each post
  std::chrono::microseconds max_stall{2000};
  // Harmful: at this rank's n-th post, 0 for never.
  std::uint64_t stall_at = 0;
  std::chrono::milliseconds long_stall{0};
  std::uint64_t silence_link_at = 0;
  std::uint64_t kill_at = 0;
  bool kill_process = false;

  std::string describe() const {
    std::string s = "seed " + std::to_string(seed);
    if (delay_chance > 0) s += ", delays (" + std::to_string(int(delay_chance * 100)) + "% of posts)";
    if (stall_chance > 0) s += ", stalls (" + std::to_string(int(stall_chance * 100)) + "% of posts)";
    if (stall_at) s += ", a " + std::to_string(long_stall.count()) + " ms stall at post " + std::to_string(stall_at);
    if (silence_link_at) s += ", a link silenced at post " + std::to_string(silence_link_at);
    if (kill_at) s += ", killed at post " + std::to_string(kill_at);
    return s;
  }
};

template <transport Inner>
class faulty {
 public:
  struct request {
    std::uint32_t slot = none;
  };
  static constexpr transport_traits traits = traits_of<Inner>();
  static constexpr link_costs costs = costs_of<Inner>();

  faulty(Inner inner, fault_plan plan)
      : inner_(std::move(inner)), plan_(plan), random_{plan.seed ^ (golden * (static_cast<std::uint64_t>(inner_.rank()) + 1))},
        streams_(std::size_t(inner_.size()) * 2) {
    if (inner_.size() > 1) {
      const int other = int(random_.below(std::uint64_t(inner_.size() - 1)));
      silenced_peer_ = other < inner_.rank() ? other : other + 1;
    }
  }

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  Inner& inner() noexcept { return inner_; }
  const fault_plan& plan() const noexcept { return plan_; }

  request post_send(int peer, message_tag tag, std::span<const std::byte> out) {
    return post({kind::send, peer, tag, out, {}, 0, 0, {}});
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> in) {
    return post({kind::recv, peer, tag, {}, in, 0, 0, {}});
  }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink)
    requires fused_recv_reduce_transport<Inner>
  {
    return post({kind::recv_reduce, peer, tag, {}, {}, bytes, granule, sink});
  }

  bool test(request& r) {
    throw_if_dead();
    release_due();
    entry& e = entries_[r.slot];
    if (!e.posted || !inner_.test(e.inner)) return false;
    free(r.slot);
    r.slot = none;
    return true;
  }

  // Waits no longer than until the next held post is due, which it then posts. A post
  // released since the last wait (say, while testing another request) is activity too:
  // its message may have been waiting for it, with no news left to wake this rank.
  bool wait_for_activity(deadline until) {
    throw_if_dead();
    release_due();
    if (std::exchange(released_since_wait_, false)) return true;
    const deadline next = next_due();
    if (next >= until) return inner_.wait_for_activity(until);
    inner_.wait_for_activity(next);
    release_due();
    released_since_wait_ = false;
    return true;
  }

  void cancel(request& r) noexcept {
    if (r.slot == none) return;
    entry& e = entries_[r.slot];
    if (e.posted) {
      inner_.cancel(e.inner);
    } else {
      auto& held = streams_[stream_of(e)];
      held.erase(std::find(held.begin(), held.end(), r.slot));
    }
    free(r.slot);
    r.slot = none;
  }

  void abort() { inner_.abort(); }

  void note_failure(std::string_view what) noexcept
    requires requires(Inner& t, std::string_view w) { t.note_failure(w); }
  {
    inner_.note_failure(what);
  }

 private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint64_t golden = 0x9e3779b97f4a7c15u;
  enum class kind : std::uint8_t { send, recv, recv_reduce };

  struct message {
    kind what;
    int peer;
    message_tag tag;
    std::span<const std::byte> out;
    std::span<std::byte> in;
    std::size_t bytes, granule;
    chunk_sink sink;
  };
  struct entry {
    message m;
    deadline due{};
    bool silenced = false;  // on a silenced link: never posted
    bool posted = false;
    typename Inner::request inner{};
  };

  // The same numbers for the same seed, whatever the standard library.
  struct splitmix64 {
    std::uint64_t state;
    std::uint64_t next() {
      std::uint64_t z = (state += golden);
      z = (z ^ (z >> 30)) * std::uint64_t{0xbf58476d1ce4e5b9u};
      z = (z ^ (z >> 27)) * std::uint64_t{0x94d049bb133111ebu};
      return z ^ (z >> 31);
    }
    std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
    bool chance(double p) { return p > 0 && double(next() >> 11) * 0x1.0p-53 < p; }
  };

  std::size_t stream_of(const entry& e) const { return std::size_t(e.m.peer) * 2 + (e.m.what == kind::send ? 0 : 1); }

  request post(message m) {
    throw_if_dead();
    if (m.peer < 0 || m.peer >= size() || m.peer == rank()) {  // the inner transport's own error
      typename Inner::request r = post_to_inner(m);
      inner_.cancel(r);
    }
    ++posts_;
    if (plan_.kill_at == posts_) die();
    if (plan_.stall_at == posts_) std::this_thread::sleep_for(plan_.long_stall);
    else if (random_.chance(plan_.stall_chance)) sleep_up_to(plan_.max_stall);

    const std::uint32_t slot = allocate();
    entry& e = entries_[slot];
    e = entry{m};
    e.silenced = plan_.silence_link_at != 0 && posts_ >= plan_.silence_link_at && m.peer == silenced_peer_;
    const auto delay = random_.chance(plan_.delay_chance)
                           ? std::chrono::microseconds(random_.below(std::uint64_t(plan_.max_delay.count()) + 1))
                           : std::chrono::microseconds(0);
    e.due = clock::now() + delay;
    auto& held = streams_[stream_of(e)];
    if (held.empty() && !e.silenced && delay.count() == 0) {
      e.inner = post_to_inner(m);
      e.posted = true;
    } else {
      held.push_back(slot);
    }
    return {slot};
  }

  typename Inner::request post_to_inner(const message& m) {
    switch (m.what) {
      case kind::send: return inner_.post_send(m.peer, m.tag, m.out);
      case kind::recv: return inner_.post_recv(m.peer, m.tag, m.in);
      case kind::recv_reduce:
        if constexpr (fused_recv_reduce_transport<Inner>) return inner_.post_recv_reduce(m.peer, m.tag, m.bytes, m.granule, m.sink);
        break;
    }
    throw error(errc::invalid_config, "faulty: the transport has no fused receive");
  }

  // Posts what is due, in each stream's order.
  void release_due() {
    const deadline now = clock::now();
    for (auto& held : streams_)
      while (!held.empty()) {
        entry& e = entries_[held.front()];
        if (e.silenced || e.due > now) break;
        e.inner = post_to_inner(e.m);
        e.posted = true;
        held.pop_front();
        released_since_wait_ = true;
      }
  }

  deadline next_due() const {
    deadline next = deadline::max();
    for (const auto& held : streams_)
      if (!held.empty() && !entries_[held.front()].silenced) next = std::min(next, entries_[held.front()].due);
    return next;
  }

  void sleep_up_to(std::chrono::microseconds most) {
    std::this_thread::sleep_for(std::chrono::microseconds(random_.below(std::uint64_t(most.count()) + 1)));
  }

  void die() {
    if (plan_.kill_process) ::raise(SIGKILL);
    dead_ = true;
    throw_if_dead();
  }
  void throw_if_dead() const {
    if (dead_)
      throw error(errc::aborted, "rank " + std::to_string(rank()) + ": faulty: this rank was killed at its post " +
                                     std::to_string(plan_.kill_at) + " (" + plan_.describe() + ")");
  }

  std::uint32_t allocate() {
    if (free_.empty()) {
      entries_.emplace_back();
      return std::uint32_t(entries_.size() - 1);
    }
    const std::uint32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void free(std::uint32_t slot) { free_.push_back(slot); }

  Inner inner_;
  fault_plan plan_;
  splitmix64 random_;
  std::vector<std::deque<std::uint32_t>> streams_;  // held posts by (peer, direction), in order
  bool released_since_wait_ = false;
  std::vector<entry> entries_;
  std::vector<std::uint32_t> free_;
  std::uint64_t posts_ = 0;
  int silenced_peer_ = -1;
  bool dead_ = false;
};

}  // namespace collectives
