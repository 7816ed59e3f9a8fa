// Transport conformance: every row of docs/concepts/transport.md, checked the same way
// on every transport, with what the concept leaves open read from the transport's
// declared traits (traits_of<T>()). Ranks are threads of this process, except where a
// rank must die: then a forked child. Expectations are the bytes sent, never what the
// transport reports about itself.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "conformance/factories.hpp"
#if defined(CONFORMANCE_OF_RDMA)
#include "conformance/rdma_factories.hpp"
#endif
#include "conformance/messages.hpp"
#include "conformance/ranks.hpp"

namespace coll = collectives;
using namespace conformance;
using coll::errc;
using std::chrono::milliseconds;

// The transports under test: one factory each (conformance/factories.hpp). The rdma
// transport's are built into a binary of their own, which links libfabric.
#if defined(CONFORMANCE_OF_RDMA)
using factories = std::tuple<rdma_tcp_factory, rdma_shm_factory>;
#else
using factories =
    std::tuple<inproc_factory, shm_factory, tcp_factory, device_standin_factory, faulty_inproc_factory, faulty_shm_factory>;
#endif

TEST_CASE_TEMPLATE_DEFINE("messages match their receives whether the receive is posted before or after they arrive", F, matching) {
  using T = typename F::transport;
  const std::vector<std::size_t> sizes{0, 1, 64, 4000, 70'000, large_message_bytes<T>()};
  for (const bool receives_first : {true, false}) {
    CAPTURE(receives_first);
    checkpoint posted, sent_1, sent_2;
    run_ranks<F>(3, [&](T& t) {
      const auto seed = [](int from, std::size_t i) { return unsigned(from * 100 + int(i)); };
      if (t.rank() == 0) {
        if (!receives_first) {
          sent_1.await();
          sent_2.await();
          keep_busy(t, 50ms);  // small messages arrive early, large ones wait
        }
        // From both peers, equal tags; posted in the reverse of the order sent.
        std::vector<bytes> got;
        std::vector<typename T::request> pending;
        for (int from : {2, 1})
          for (std::size_t i = sizes.size(); i-- > 0;) {
            got.push_back(blank(sizes[i]));
            pending.push_back(F::recv(t, from, tag(std::uint32_t(i)), in(got.back())));
          }
        posted.raise();
        complete_all(t, pending);
        std::size_t k = 0;
        for (int from : {2, 1})
          for (std::size_t i = sizes.size(); i-- > 0; ++k) CHECK(got[k] == pattern(sizes[i], seed(from, i)));
      } else {
        if (receives_first) posted.await();
        std::vector<bytes> sending;
        for (std::size_t i = 0; i < sizes.size(); ++i) sending.push_back(pattern(sizes[i], seed(t.rank(), i)));
        std::vector<typename T::request> pending;
        for (std::size_t i = 0; i < sizes.size(); ++i) pending.push_back(F::send(t, 0, tag(std::uint32_t(i)), out(sending[i])));
        (t.rank() == 1 ? sent_1 : sent_2).raise();
        complete_all(t, pending);
        posted.await();  // the receiver has its requests before this rank leaves
      }
    });
  }
}

TEST_CASE_TEMPLATE_DEFINE("a small send completes before its receive is posted only where declared", F, send_completion) {
  using T = typename F::transport;
  constexpr bool buffered = coll::traits_of<T>().sends == coll::send_completion::when_buffered;
  CAPTURE(buffered);
  checkpoint asked, received;
  run_ranks<F>(2, [&](T& t) {
    const bytes message = pattern(64, 1);
    if (t.rank() == 1) {
      auto s = F::send(t, 0, tag(1), out(message));
      const bool early = completes_within(t, s, buffered ? patience : watch_time);
      CHECK(early == buffered);
      asked.raise();
      if (!early) complete_all(t, {s});
      received.await();
    } else {
      asked.await();
      bytes got = blank(64);
      complete_all(t, {F::recv(t, 1, tag(1), in(got))});
      CHECK(got == message);
      received.raise();
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("a large message that comes first waits for its receive, and holds up its peer's later ones only where declared", F, large_early) {
  using T = typename F::transport;
  constexpr bool blocks = coll::traits_of<T>().large_early_message_blocks_peer;
  CAPTURE(blocks);
  const std::size_t large = large_message_bytes<T>();
  checkpoint sent, done;
  run_ranks<F>(2, [&](T& t) {
    const bytes big = pattern(large, 1), small = pattern(64, 2);
    if (t.rank() == 1) {
      auto l = F::send(t, 0, tag(1), out(big));
      auto s = F::send(t, 0, tag(2), out(small));
      sent.raise();
      complete_all(t, {l, s});
      done.await();
    } else {
      sent.await();
      keep_busy(t, 50ms);
      bytes got_small = blank(64), got_big = blank(large);
      auto s = F::recv(t, 1, tag(2), in(got_small));
      const bool small_passed = completes_within(t, s, blocks ? watch_time : patience);
      CHECK(small_passed == !blocks);
      std::vector<typename T::request> pending{F::recv(t, 1, tag(1), in(got_big))};
      if (!small_passed) pending.push_back(s);
      complete_all(t, pending);
      CHECK(got_big == big);
      CHECK(got_small == small);
      done.raise();
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("messages with equal tags are received in the order sent", F, fifo) {
  using T = typename F::transport;
  if (!coll::traits_of<T>().fifo_equal_tags) {
    MESSAGE(std::string(F::name) << " does not declare first-in first-out matching of equal tags: skipped");
    return;
  }
  const std::size_t large = large_message_bytes<T>();
  // Same-sized messages (a swap would go unnoticed by size), empty ones among them.
  const std::vector<std::vector<std::size_t>> rounds{{64, 64, 0, 64, 64}, {large, large, large}};
  for (const bool receives_first : {true, false})
    for (const auto& sizes : rounds) {
      CAPTURE(receives_first);
      CAPTURE(sizes.front());
      checkpoint posted, sent;
      run_ranks<F>(2, [&](T& t) {
        if (t.rank() == 0) {
          if (!receives_first) {
            sent.await();
            keep_busy(t, 50ms);
          }
          std::vector<bytes> got;
          got.reserve(sizes.size());
          std::vector<typename T::request> pending;
          for (std::size_t n : sizes) {
            got.push_back(blank(n));
            pending.push_back(F::recv(t, 1, tag(3), in(got.back())));
          }
          posted.raise();
          complete_all(t, pending);
          for (std::size_t i = 0; i < sizes.size(); ++i) CHECK(got[i] == pattern(sizes[i], unsigned(i)));
        } else {
          if (receives_first) posted.await();
          std::vector<bytes> sending;
          for (std::size_t i = 0; i < sizes.size(); ++i) sending.push_back(pattern(sizes[i], unsigned(i)));
          std::vector<typename T::request> pending;
          for (auto& m : sending) pending.push_back(F::send(t, 0, tag(3), out(m)));
          sent.raise();
          complete_all(t, pending);
          posted.await();
        }
      });
    }
}

TEST_CASE_TEMPLATE_DEFINE("a receive posted while an earlier message with its tag is partway in gets that message", F, fifo_partway) {
  using T = typename F::transport;
  if (!coll::traits_of<T>().fifo_equal_tags) {
    MESSAGE(std::string(F::name) << " does not declare first-in first-out matching of equal tags: skipped");
    return;
  }
  // Two early-sized messages with one tag, each three of shm's two small slots long.
  // The receiver takes in the first two fragments of the first; the sender then fills
  // the slots with the first's last fragment and the second's first; only then is the
  // receive posted.
  constexpr std::size_t n = 2500;
  checkpoint sent, half, pushed, posted;
  run_ranks<F>(2, [&](T& t) {
    const bytes first = pattern(n, 1), second = pattern(n, 2), last = pattern(64, 3);
    if (t.rank() == 1) {
      std::vector<typename T::request> pending{F::send(t, 0, tag(1), out(first)), F::send(t, 0, tag(1), out(second)),
                                               F::send(t, 0, tag(2), out(last))};
      sent.raise();
      half.await();
      for (const auto until = coll::clock::now() + 20ms; coll::clock::now() < until;) {
        std::erase_if(pending, [&](auto& r) { return t.test(r); });
        t.wait_for_activity(std::min(until, coll::clock::now() + 1ms));
      }
      pushed.raise();
      posted.await();
      complete_all(t, pending);
      posted.await();
    } else {
      sent.await();
      bytes got_first = blank(n), got_second = blank(n), got_last = blank(64);
      auto other = F::recv(t, 1, tag(2), in(got_last));
      // Takes in what has come so far (where nothing holds it up, the last message too).
      const bool other_done = completes_within(t, other, 20ms);
      half.raise();
      pushed.await();
      std::vector<typename T::request> pending{F::recv(t, 1, tag(1), in(got_first)), F::recv(t, 1, tag(1), in(got_second))};
      if (!other_done) pending.push_back(other);
      posted.raise();
      complete_all(t, pending);
      CHECK(got_first == first);
      CHECK(got_second == second);
      CHECK(got_last == last);
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("a message of another size fails only its receive, and the next one with the tag arrives", F, sizes) {
  using T = typename F::transport;
  constexpr bool sender_refused = coll::traits_of<T>().sender_sees_size_refusal;
  const std::size_t large = large_message_bytes<T>();
  struct mismatch {
    std::size_t expected, sent;
    errc code;
  };
  const std::vector<mismatch> cases{{64, 100, errc::message_truncated},    {100, 64, errc::buffer_size_mismatch},
                                    {4000, large, errc::message_truncated}, {large, 4000, errc::buffer_size_mismatch},
                                    {0, 8, errc::message_truncated},        {8, 0, errc::buffer_size_mismatch}};
  for (const bool receives_first : {true, false}) {
    CAPTURE(receives_first);
    std::vector<checkpoint> posted(cases.size());
    checkpoint finished;
    run_ranks<F>(2, [&](T& t) {
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const mismatch& c = cases[i];
        const auto step = std::uint32_t(10 + i);
        CAPTURE(c.expected);
        CAPTURE(c.sent);
        if (t.rank() == 0) {
          bytes wrong = blank(c.expected), right = blank(c.expected);
          if (!receives_first) keep_busy(t, 20ms);
          auto r = F::recv(t, 1, tag(step), in(wrong));
          posted[i].raise();
          CHECK(outcome(t, r) == c.code);
          // The next message with the same tag, of the expected size, arrives whole.
          complete_all(t, {F::recv(t, 1, tag(step), in(right))});
          CHECK(right == pattern(c.expected, step));
        } else {
          if (receives_first) posted[i].await();
          const bytes bad = pattern(c.sent, step + 1000), good = pattern(c.expected, step);
          auto b = F::send(t, 0, tag(step), out(bad));
          auto g = F::send(t, 0, tag(step), out(good));
          const std::error_code sender_saw = outcome(t, b);
          if (sender_refused) CHECK(sender_saw == errc::buffer_size_mismatch);
          else CHECK_FALSE(sender_saw);
          complete_all(t, {g});
          posted[i].await();
        }
      }
      if (t.rank() == 0) finished.raise();
      else finished.await();  // rank 1 leaves once rank 0 has all it expects
    });
  }
}

TEST_CASE_TEMPLATE_DEFINE("a cancelled receive leaves its buffer alone, and its message goes to the next receive", F, cancel_receive) {
  using T = typename F::transport;
  checkpoint cancelled;
  run_ranks<F>(2, [&](T& t) {
    const bytes message = pattern(64, 5);
    if (t.rank() == 0) {
      bytes first = blank(64), second = blank(64);
      auto r = F::recv(t, 1, tag(1), in(first));
      t.cancel(r);
      auto r2 = F::recv(t, 1, tag(1), in(second));
      cancelled.raise();
      complete_all(t, {r2});
      CHECK(second == message);
      CHECK(all_untouched(first));
    } else {
      cancelled.await();
      complete_all(t, {F::send(t, 0, tag(1), out(message))});
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("a send cancelled before any of it moved is never delivered, and the link goes on", F, cancel_send) {
  using T = typename F::transport;
  // More than a socket takes at once: a transport may write a send when it is posted.
  const std::size_t large = halfway_message_bytes;
  checkpoint posted, done;
  run_ranks<F>(2, [&](T& t) {
    const bytes big = pattern(large, 1), after = pattern(64, 3);
    if (t.rank() == 1) {
      bytes withdrawn = pattern(64, 2);
      auto l = F::send(t, 0, tag(1), out(big));  // the link is busy with this one
      auto w = F::send(t, 0, tag(2), out(withdrawn));
      t.cancel(w);
      std::fill(withdrawn.begin(), withdrawn.end(), std::byte{0x11});
      auto a = F::send(t, 0, tag(3), out(after));
      posted.raise();
      complete_all(t, {l, a});
      done.await();
    } else {
      posted.await();
      bytes got_big = blank(large), got_after = blank(64), got_withdrawn = blank(64);
      complete_all(t, {F::recv(t, 1, tag(1), in(got_big)), F::recv(t, 1, tag(3), in(got_after))});
      CHECK(got_big == big);
      CHECK(got_after == after);
      auto w = F::recv(t, 1, tag(2), in(got_withdrawn));
      CHECK(outcome(t, w, watch_time) == errc::timeout);
      CHECK(all_untouched(got_withdrawn));
      done.raise();
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("a receive cancelled halfway leaves its buffer alone, and the link does as declared", F, cancel_receive_halfway) {
  using T = typename F::transport;
  constexpr auto declared = coll::traits_of<T>().cancel_halfway;
  std::atomic<bool> halfway{false};
  checkpoint stuck, decided, settled, judged;
  run_ranks<F>(2, [&](T& t) {
    if (t.rank() == 0) {
      stuck.await();
      bytes got = blank(halfway_message_bytes);
      auto r = F::recv(t, 1, tag(1), in(got));
      // Takes in what the link holds, which is less than the message while the sender is stopped.
      const auto until = coll::clock::now() + patience;
      bool whole = false;
      while (!(whole = t.test(r)) && got.front() == untouched && coll::clock::now() < until) t.wait_for_activity(until);
      REQUIRE((whole || got.front() != untouched));
      if (!whole) {
        t.cancel(r);
        std::fill(got.begin(), got.end(), untouched);
      }
      halfway = !whole;
      decided.raise();
      if (whole) {
        MESSAGE(std::string(F::name) << " moved the whole message in one step: nothing to cancel halfway");
        CHECK(got == pattern(halfway_message_bytes, 1));
        judged.raise();
        return;
      }
      keep_busy(t, watch_time);
      CHECK(all_untouched(got));
      // The sender has given its send up too (shm: it told this rank it abandoned the
      // message) before the next receive, which must still fail for this rank's break.
      settled.await();
      bytes next = blank(64);
      auto n = F::recv(t, 1, tag(2), in(next));
      if (declared == coll::cancel_mid_transfer::link_fails) {
        CHECK(outcome(t, n) == errc::protocol_error);
      } else if (declared == coll::cancel_mid_transfer::link_goes_on) {
        CHECK_FALSE(outcome(t, n));
        CHECK(next == pattern(64, 2));
      } else {
        outcome(t, n, watch_time);  // may stall; only the buffer's safety is promised
      }
      judged.raise();
    } else {
      const bytes message = pattern(halfway_message_bytes, 1), next = pattern(64, 2);
      auto s = F::send(t, 0, tag(1), out(message));
      bool sent = false;
      for (const auto until = coll::clock::now() + 50ms; !sent && coll::clock::now() < until;) {
        sent = t.test(s);
        if (!sent) t.wait_for_activity(std::min(until, coll::clock::now() + 1ms));
      }
      stuck.raise();  // and stops, so that the receiver can't have it all
      decided.await();
      // Once the receiver gave up on it, the send may finish, fail, or stall until its limit.
      if (!sent) outcome(t, s, milliseconds(500));
      settled.raise();
      if (halfway && declared == coll::cancel_mid_transfer::link_goes_on) complete_all(t, {F::send(t, 0, tag(2), out(next))});
      // A sender that left would make the next receive fail for its leaving, not for the link.
      judged.await();
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("a send cancelled halfway is no longer read, and the link does as declared", F, cancel_send_halfway) {
  using T = typename F::transport;
  constexpr auto declared = coll::traits_of<T>().cancel_halfway;
  std::atomic<bool> halfway{false};
  checkpoint decided;
  run_ranks<F>(2, [&](T& t) {
    const bytes message = pattern(halfway_message_bytes, 1), next = pattern(64, 2);
    if (t.rank() == 0) {
      decided.await();  // meanwhile its receiver is idle, so the message is stuck in the link
      bytes got = blank(halfway_message_bytes);
      auto r = F::recv(t, 1, tag(1), in(got));
      outcome(t, r, milliseconds(500));  // what had left the sender may still come, or nothing
      // Every byte is the message's or untouched: none of what the sender wrote after cancelling.
      std::size_t foreign = 0;
      for (std::size_t i = 0; i < got.size(); ++i) foreign += got[i] != message[i] && got[i] != untouched;
      CHECK(foreign == 0);
      if (halfway && declared == coll::cancel_mid_transfer::link_goes_on) {
        bytes after = blank(64);
        complete_all(t, {F::recv(t, 1, tag(2), in(after))});
        CHECK(after == next);
      }
    } else {
      bytes sending = message;
      auto s = F::send(t, 0, tag(1), out(sending));
      bool whole = false;
      for (const auto until = coll::clock::now() + 100ms; !whole && coll::clock::now() < until;) {
        whole = t.test(s);
        if (!whole) t.wait_for_activity(std::min(until, coll::clock::now() + 1ms));
      }
      if (!whole) {
        t.cancel(s);
        std::fill(sending.begin(), sending.end(), std::byte{0x11});
      }
      halfway = !whole;
      decided.raise();
      if (whole) {
        MESSAGE(std::string(F::name) << " finished the send before its receive was posted");
        return;
      }
      auto n = F::send(t, 0, tag(2), out(next));
      if (declared == coll::cancel_mid_transfer::link_fails) CHECK(outcome(t, n) == errc::protocol_error);
      else if (declared == coll::cancel_mid_transfer::link_goes_on) CHECK_FALSE(outcome(t, n));
      else outcome(t, n, watch_time);
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("abort from another thread wakes every rank's wait with errc::aborted, for good", F, abort) {
  using T = typename F::transport;
  checkpoint seen_0, seen_1;
  run_ranks<F>(2, [&](T& t) {
    bytes never = blank(64);
    auto r = F::recv(t, 1 - t.rank(), tag(1), in(never));
    std::jthread aborter;
    if (t.rank() == 0)
      aborter = std::jthread([&t] {
        std::this_thread::sleep_for(100ms);
        t.abort();
      });
    const auto started = coll::clock::now();
    CHECK(outcome(t, r, 3s) == errc::aborted);
    CHECK(coll::clock::now() - started < 2s);
    aborter = {};
    auto again = F::recv(t, 1 - t.rank(), tag(2), in(never));
    CHECK(outcome(t, again, 1s) == errc::aborted);
    CHECK(all_untouched(never));
    // Both stay until both have seen it, so that no rank learns of the abort from a peer leaving.
    (t.rank() == 0 ? seen_0 : seen_1).raise();
    const checkpoint& other = t.rank() == 0 ? seen_1 : seen_0;
    while (!other.raised()) t.wait_for_activity(coll::clock::now() + 1ms);
  });
}

TEST_CASE_TEMPLATE_DEFINE("a wait returns false at its deadline, and a receive with no sender does not hang", F, deadlines) {
  using T = typename F::transport;
  checkpoint finished_0, finished_1;
  run_ranks<F>(2, [&](T& t) {
    bytes never = blank(64);
    auto r = F::recv(t, 1 - t.rank(), tag(1), in(never));
    const auto until = coll::clock::now() + 300ms;
    bool woke = true;
    while (woke && coll::clock::now() < until + 2s) woke = t.wait_for_activity(until);
    const auto now = coll::clock::now();
    CHECK_FALSE(woke);
    CHECK(now >= until);
    CHECK(now < until + 1s);
    const auto past = coll::clock::now();
    t.wait_for_activity(past - 1s);  // a deadline already gone: returns at once
    CHECK(coll::clock::now() - past < 500ms);
    CHECK_FALSE(t.test(r));
    CHECK(outcome(t, r, 200ms) == errc::timeout);
    CHECK(all_untouched(never));
    (t.rank() == 0 ? finished_0 : finished_1).raise();
    (t.rank() == 0 ? finished_1 : finished_0).await();
  });
}

TEST_CASE_TEMPLATE_DEFINE("a peer that leaves while a message from it is expected is reported lost", F, peer_leaves) {
  using T = typename F::transport;
  if (!coll::traits_of<T>().reports_departed_peer) {
    MESSAGE(std::string(F::name) << " does not declare that it notices a peer leaving: skipped");
    return;
  }
  checkpoint posted;
  run_ranks<F>(2, [&](T& t) {
    if (t.rank() == 1) {
      posted.await();
      return;  // destroys its transport
    }
    bytes never = blank(64);
    auto r = F::recv(t, 1, tag(1), in(never));
    posted.raise();
    const auto started = coll::clock::now();
    CHECK(outcome(t, r) == errc::peer_lost);
    CHECK(coll::clock::now() - started < 3s);
  });
}

TEST_CASE_TEMPLATE_DEFINE("a peer process that dies while a message from it is expected is reported lost", F, peer_dies) {
  using T = typename F::transport;
  if (!coll::traits_of<T>().ranks_can_be_processes) {
    MESSAGE(std::string(F::name) << " does not declare that its ranks can be processes, so none can die alone: skipped");
    return;
  }
  typename F::group group(2);
  int joined[2];  // the child dies once this rank has joined and closed its end
  REQUIRE(::pipe(joined) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(joined[1]);
    try {
      auto t = group.join(1);
      char byte = 0;
      [[maybe_unused]] const auto n = ::read(joined[0], &byte, 1);
      ::kill(::getpid(), SIGKILL);  // no goodbye
    } catch (...) {
    }
    ::_exit(3);
  }
  REQUIRE(child > 0);
  ::close(joined[0]);
  auto release_child = [&, open = true]() mutable {
    if (open) ::close(joined[1]);
    open = false;
  };
  try {
    auto t = group.join(0);
    release_child();
    bytes never = blank(64);
    auto r = F::recv(t, 1, tag(1), in(never));
    const auto started = coll::clock::now();
    CHECK(outcome(t, r) == errc::peer_lost);
    CHECK(coll::clock::now() - started < 3s);
  } catch (...) {
    release_child();
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    throw;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
}

TEST_CASE_TEMPLATE_DEFINE("a fused receive hands over whole elements, in order, covering the message once", F, fused) {
  using T = typename F::transport;
  if constexpr (!coll::fused_recv_reduce_transport<T>) {
    MESSAGE(std::string(F::name) << " has no fused receive-reduce: skipped");
  } else {
    const std::vector<std::size_t> granules{1, 4, 12, 24, 1000};
    for (const bool receives_first : {true, false}) {
      CAPTURE(receives_first);
      checkpoint posted, sent, done;
      run_ranks<F>(2, [&](T& t) {
        std::uint32_t step = 0;
        std::vector<std::pair<std::size_t, std::size_t>> shapes;  // granule, elements
        for (std::size_t g : granules)
          for (std::size_t n : {std::size_t(5), std::size_t(1001), 300'000 / g}) shapes.emplace_back(g, n);
        if (t.rank() == 0) {
          if (!receives_first) {
            sent.await();
            keep_busy(t, 50ms);
          }
          std::vector<piece_log> logs(shapes.size());
          std::vector<typename T::request> pending;
          for (auto [g, n] : shapes) {
            auto& log = logs[step];
            log.granule = g;
            log.message = blank(g * n);
            pending.push_back(t.post_recv_reduce(1, tag(step++), g * n, g, coll::chunk_sink{&log, &piece_log::consume}));
          }
          posted.raise();
          complete_all(t, pending);
          for (std::size_t i = 0; i < shapes.size(); ++i) {
            const std::size_t g = shapes[i].first, n = shapes[i].second;
            CAPTURE(g);
            CAPTURE(n);
            CHECK(logs[i].pieces >= 1);
            CHECK(logs[i].misplaced == 0);
            CHECK(logs[i].partial == 0);
            CHECK(logs[i].covered == g * n);
            CHECK(logs[i].message == pattern(g * n, unsigned(i)));
          }
          done.raise();
        } else {
          if (receives_first) posted.await();
          std::vector<bytes> sending;
          for (auto [g, n] : shapes) sending.push_back(pattern(g * n, step++));
          std::vector<typename T::request> pending;
          for (std::size_t i = 0; i < sending.size(); ++i) pending.push_back(t.post_send(0, tag(std::uint32_t(i)), out(sending[i])));
          sent.raise();
          complete_all(t, pending);
          done.await();
        }
      });
    }
  }
}

TEST_CASE_TEMPLATE_DEFINE("an exception from a fused receive's sink comes out of test", F, fused_sink_throws) {
  using T = typename F::transport;
  if constexpr (!coll::fused_recv_reduce_transport<T>) {
    MESSAGE(std::string(F::name) << " has no fused receive-reduce: skipped");
  } else {
    struct sink_failure {};
    checkpoint done;
    run_ranks<F>(2, [&](T& t) {
      const bytes message = pattern(4800, 1);
      if (t.rank() == 1) {
        auto s = t.post_send(0, tag(1), out(message));
        outcome(t, s, 1s);  // the receiver's failure may or may not reach the sender
        done.await();
        return;
      }
      auto throwing = [](void*, std::size_t, std::span<const std::byte>) { throw sink_failure{}; };
      auto r = t.post_recv_reduce(1, tag(1), message.size(), 12, coll::chunk_sink{nullptr, throwing});
      bool thrown = false, completed = false;
      const auto until = coll::clock::now() + patience;
      try {
        while (!(completed = t.test(r)) && coll::clock::now() < until) t.wait_for_activity(until);
      } catch (const sink_failure&) {
        thrown = true;
      }
      if (!completed) t.cancel(r);
      CHECK(thrown);
      done.raise();
    });
  }
}

TEST_CASE_TEMPLATE_APPLY(matching, factories);
TEST_CASE_TEMPLATE_APPLY(send_completion, factories);
TEST_CASE_TEMPLATE_APPLY(large_early, factories);
TEST_CASE_TEMPLATE_APPLY(fifo, factories);
TEST_CASE_TEMPLATE_APPLY(fifo_partway, factories);
TEST_CASE_TEMPLATE_APPLY(sizes, factories);
TEST_CASE_TEMPLATE_APPLY(cancel_receive, factories);
TEST_CASE_TEMPLATE_APPLY(cancel_send, factories);
TEST_CASE_TEMPLATE_APPLY(cancel_receive_halfway, factories);
TEST_CASE_TEMPLATE_APPLY(cancel_send_halfway, factories);
TEST_CASE_TEMPLATE_APPLY(abort, factories);
TEST_CASE_TEMPLATE_APPLY(deadlines, factories);
TEST_CASE_TEMPLATE_APPLY(peer_leaves, factories);
TEST_CASE_TEMPLATE_APPLY(peer_dies, factories);
TEST_CASE_TEMPLATE_APPLY(fused, factories);
TEST_CASE_TEMPLATE_APPLY(fused_sink_throws, factories);
