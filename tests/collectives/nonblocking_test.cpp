// Non-blocking calls: every collective started at once on every rank, many in flight,
// mixed sizes, waited for in several orders (and with a blocking call made while they
// are in flight), each result against the serial reference; errors and deadlines that
// reach only the handle they concern.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "harness.hpp"

using namespace testing;
using namespace std::chrono_literals;

namespace {

enum class order { as_started, reversed, any_first };

// Every rank's part j of the P-part inputs below: part j of rank r.
template <class T, class Op>
std::vector<T> part(int r, int j, std::size_t n) {
  return inputs<T, Op>(r * 64 + j, n);
}

template <class T, class Op>
std::vector<T> parts_of(int r, const std::vector<std::size_t>& counts) {
  std::vector<T> all;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    const auto p = part<T, Op>(r, int(j), counts[j]);
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

template <class T, class Op>
std::vector<T> fold(const std::vector<std::vector<T>>& given) {
  return reduced<T, Op>(given);
}

// Starts every collective, out of place and in place, as non-blocking calls on one
// rank; waits for them in `how`; checks each against its serial reference.
std::string every_call_in_flight(comm& c, std::size_t n, order how) {
  const int p = c.size(), r = c.rank();
  const int root = int(n % std::size_t(p));
  const bool is_root = r == root;
  const std::vector<std::size_t> even(std::size_t(p), n);
  const auto counts = uneven_counts(p, n);
  // all_to_allv: rank r sends (r + j) % 3 * n / 2 + j elements to rank j.
  auto sends_to = [&](int from, int to) { return std::size_t((from + to) % 3) * n / 2 + std::size_t(to); };
  std::vector<std::size_t> send_counts, recv_counts;
  for (int j = 0; j < p; ++j) send_counts.push_back(sends_to(r, j)), recv_counts.push_back(sends_to(j, r));

  // Inputs, and the buffers the calls write.
  auto sums = inputs<std::int64_t, coll::sum>(r, n);  // in place
  const auto mins = inputs<double, coll::min>(r, n);
  std::vector<double> min_out(n);
  const auto best = inputs<scored, arg_max>(r, n);
  std::vector<scored> best_out(n);
  auto products = inputs<mat2, mat_mul>(r, n);  // in place; not commutative
  const auto to_reduce = inputs<float, coll::max>(r, n);
  std::vector<float> reduced_out(is_root ? n : 0);
  auto broadcast_data = is_root ? inputs<std::int32_t, coll::min>(root, n) : std::vector<std::int32_t>(n, -1);
  auto gathered_in_place = std::vector<std::int32_t>(n * std::size_t(p), -1);
  std::copy_n(part<std::int32_t, coll::min>(r, 0, n).begin(), n, gathered_in_place.begin() + std::ptrdiff_t(n * std::size_t(r)));
  std::vector<double> gatheredv(std::accumulate(counts.begin(), counts.end(), std::size_t{0}));
  const auto mine_v = part<double, coll::min>(r, 0, counts[std::size_t(r)]);
  const auto rs_in = parts_of<std::int32_t, coll::bit_xor>(r, even);
  std::vector<std::int32_t> rs_out(n);
  auto rsv_data = parts_of<std::int64_t, coll::avg>(r, counts);  // in place
  const auto gather_in = part<float, coll::min>(r, 0, n);
  std::vector<float> gather_out(is_root ? n * std::size_t(p) : 0);
  std::vector<double> gatherv_out(is_root ? gatheredv.size() : 0);
  const auto root_parts = is_root ? parts_of<std::int64_t, coll::min>(root, even) : std::vector<std::int64_t>{};
  std::vector<std::int64_t> scatter_out(n);
  const auto root_parts_v = is_root ? parts_of<std::int64_t, coll::max>(root, counts) : std::vector<std::int64_t>{};
  std::vector<std::int64_t> scatterv_out(counts[std::size_t(r)]);
  auto a2a = parts_of<std::int32_t, coll::sum>(r, even);  // in place
  const auto a2av_in = parts_of<double, coll::sum>(r, send_counts);
  std::vector<double> a2av_out(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}));
  const auto message = inputs<std::int64_t, coll::max>(r, n);
  std::vector<std::int64_t> message_in(n);

  std::vector<coll::call_handle<comm::transport_type>> h;
  h.push_back(coll::iall_reduce(c, sums, coll::sum{}));
  h.push_back(coll::iall_reduce(c, mins, min_out, coll::min{}));
  h.push_back(coll::iall_reduce<coll::ring>(c, best, best_out, arg_max{}));
  h.push_back(coll::iall_reduce(c, products, mat_mul{}));
  h.push_back(coll::ireduce(c, to_reduce, reduced_out, coll::max{}, root));
  h.push_back(coll::ibroadcast(c, broadcast_data, root));
  h.push_back(coll::iall_gather(c, gathered_in_place));
  h.push_back(coll::iall_gatherv(c, mine_v, gatheredv, counts));
  h.push_back(coll::ireduce_scatter(c, rs_in, rs_out, coll::bit_xor{}));
  h.push_back(coll::ireduce_scatterv(c, rsv_data, counts, coll::avg{}));
  h.push_back(coll::igather(c, gather_in, gather_out, root));
  h.push_back(coll::igatherv(c, mine_v, gatherv_out, counts, root));
  h.push_back(coll::iscatter(c, root_parts, scatter_out, root));
  h.push_back(coll::iscatterv(c, root_parts_v, scatterv_out, counts, root));
  h.push_back(coll::iall_to_all(c, a2a));
  h.push_back(coll::iall_to_allv(c, a2av_in, send_counts, a2av_out, recv_counts));
  h.push_back(coll::ibarrier(c));
  if (p > 1) {
    h.push_back(coll::isend(c, message, (r + 1) % p, 5));
    h.push_back(coll::irecv(c, message_in, (r + p - 1) % p, 5));
  }
  // A blocking call while all of those are in flight: it must not wait on them, nor they on it.
  const std::int64_t ranks_total = coll::all_reduce(c, std::int64_t{r}, coll::sum{});

  switch (how) {
    case order::as_started: coll::wait_all(std::span(h)); break;
    case order::reversed:
      for (auto k = h.size(); k-- > 0;) h[k].wait();
      break;
    case order::any_first:
      for (std::size_t left = h.size(); left > 0; --left) {
        const std::size_t k = coll::wait_any(std::span(h).first(left));
        std::swap(h[k], h[left - 1]);  // done: out of the list
      }
      break;
  }

  // The references, computed serially from every rank's inputs.
  std::vector<std::vector<std::int64_t>> all_sums, all_rsv;
  std::vector<std::vector<double>> all_mins;
  std::vector<std::vector<scored>> all_best;
  std::vector<std::vector<mat2>> all_products;
  std::vector<std::vector<float>> all_max;
  for (int q = 0; q < p; ++q) {
    all_sums.push_back(inputs<std::int64_t, coll::sum>(q, n));
    all_mins.push_back(inputs<double, coll::min>(q, n));
    all_best.push_back(inputs<scored, arg_max>(q, n));
    all_products.push_back(inputs<mat2, mat_mul>(q, n));
    all_max.push_back(inputs<float, coll::max>(q, n));
    all_rsv.push_back(part<std::int64_t, coll::avg>(q, r, counts[std::size_t(r)]));
  }
  std::vector<std::vector<std::int32_t>> all_rs;
  for (int q = 0; q < p; ++q) all_rs.push_back(part<std::int32_t, coll::bit_xor>(q, r, n));
  std::vector<std::int32_t> want_gathered;
  std::vector<double> want_gatheredv;
  std::vector<float> want_gather;
  std::vector<std::int32_t> want_a2a;
  std::vector<double> want_a2av;
  for (int q = 0; q < p; ++q) {
    const auto g = part<std::int32_t, coll::min>(q, 0, n);
    want_gathered.insert(want_gathered.end(), g.begin(), g.end());
    const auto gv = part<double, coll::min>(q, 0, counts[std::size_t(q)]);
    want_gatheredv.insert(want_gatheredv.end(), gv.begin(), gv.end());
    const auto gf = part<float, coll::min>(q, 0, n);
    want_gather.insert(want_gather.end(), gf.begin(), gf.end());
    const auto x = part<std::int32_t, coll::sum>(q, r, n);
    want_a2a.insert(want_a2a.end(), x.begin(), x.end());
    const auto xv = part<double, coll::sum>(q, r, sends_to(q, r));
    want_a2av.insert(want_a2av.end(), xv.begin(), xv.end());
  }
  const auto rsv_displ = coll::plan::displacements(std::span<const std::size_t>(counts).first(std::size_t(r)));

  std::string problem;
  auto note = [&](std::string found) {
    if (problem.empty()) problem = std::move(found);
  };
  note(ranks_total == std::int64_t(p) * (p - 1) / 2 ? "" : "the blocking all_reduce made while calls were in flight");
  note(mismatch<std::int64_t>(sums, fold<std::int64_t, coll::sum>(all_sums), "iall_reduce sum in place"));
  note(mismatch<double>(min_out, fold<double, coll::min>(all_mins), "iall_reduce min"));
  note(mismatch<scored>(best_out, fold<scored, arg_max>(all_best), "iall_reduce<ring> arg_max (a user op)"));
  note(mismatch<mat2>(products, fold<mat2, mat_mul>(all_products), "iall_reduce mat_mul (not commutative) in place"));
  if (is_root) note(mismatch<float>(reduced_out, fold<float, coll::max>(all_max), "ireduce max"));
  note(mismatch<std::int32_t>(broadcast_data, inputs<std::int32_t, coll::min>(root, n), "ibroadcast in place"));
  note(mismatch<std::int32_t>(gathered_in_place, want_gathered, "iall_gather in place"));
  note(mismatch<double>(gatheredv, want_gatheredv, "iall_gatherv"));
  note(mismatch<std::int32_t>(rs_out, fold<std::int32_t, coll::bit_xor>(all_rs), "ireduce_scatter bit_xor"));
  note(mismatch<std::int64_t>(std::span(rsv_data).subspan(rsv_displ.back(), counts[std::size_t(r)]),
                              fold<std::int64_t, coll::avg>(all_rsv), "ireduce_scatterv avg in place"));
  if (is_root) note(mismatch<float>(gather_out, want_gather, "igather"));
  if (is_root) note(mismatch<double>(gatherv_out, want_gatheredv, "igatherv"));
  note(mismatch<std::int64_t>(scatter_out, part<std::int64_t, coll::min>(root, r, n), "iscatter"));
  note(mismatch<std::int64_t>(scatterv_out, part<std::int64_t, coll::max>(root, r, counts[std::size_t(r)]), "iscatterv"));
  note(mismatch<std::int32_t>(a2a, want_a2a, "iall_to_all in place"));
  note(mismatch<double>(a2av_out, want_a2av, "iall_to_allv"));
  if (p > 1) note(mismatch<std::int64_t>(message_in, inputs<std::int64_t, coll::max>((r + p - 1) % p, n), "irecv"));
  return problem;
}

}  // namespace

TEST_CASE("every collective started at once, non-blocking, matches its serial reference, whatever the order of waiting") {
  for (int p : rank_counts)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t(p + 1), std::size_t{1000}, std::size_t{40'003}})
      for (order how : {order::as_started, order::reversed, order::any_first}) {
        INFO("P=", p, " N=", n, " order ", int(how));
        on_ranks(p, [&](comm& c) { return every_call_in_flight(c, n, how); });
      }
}

TEST_CASE("a failed receive fails only its own handle; the calls around it finish") {
  for (int p : rank_counts) {
    if (p < 2) continue;
    on_ranks(p, [&](comm& c) -> std::string {
      const int r = c.rank();
      std::vector<float> before(1000, 1.0f), after(33, float(r));
      auto first = coll::iall_reduce(c, before, coll::sum{});
      std::vector<int> sent(10, r), too_small(5);
      std::optional<coll::call_handle<comm::transport_type>> message;
      if (r == 0) message = coll::isend(c, sent, 1, 9);
      if (r == 1) message = coll::irecv(c, too_small, 0, 9);
      auto second = coll::iall_reduce(c, after, coll::max{});
      second.wait();
      first.wait();
      if (r == 1) {
        try {
          message->wait();
          return "a receive of 5 elements took a message of 10";
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::message_truncated && e.code() != coll::errc::buffer_size_mismatch)
            return std::string("the receive failed with another error: ") + e.what();
        }
      }
      if (r == 0) {
        try {
          message->wait();  // the sender learns of the refusal only on some transports
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::buffer_size_mismatch) return std::string("the send failed with: ") + e.what();
        }
      }
      coll::barrier(c);
      if (before[999] != float(p) || after[0] != float(p - 1)) return "the calls around the failed one are wrong";
      return "";
    });
  }
}

TEST_CASE("a handle's deadline is its own: wait_until returns at the caller's time, the call fails at its own") {
  for (int p : rank_counts) {
    if (p < 2) continue;
    on_ranks(p, [&](comm& c) -> std::string {
      const int r = c.rank();
      std::vector<int> never(4);
      std::optional<coll::call_handle<comm::transport_type>> orphan;
      {
        coll::scoped_timeout short_calls(c, 300ms);
        if (r == 0) orphan = coll::irecv(c, never, 1, 77);  // rank 1 sends nothing with tag 77
      }
      std::vector<double> data(5000, 1.0);
      auto ok = coll::iall_reduce(c, data, coll::sum{});  // the communicator's usual timeout
      if (r == 0) {
        const auto t0 = coll::clock::now();
        if (orphan->wait_for(20ms)) return "wait_for returned true for a receive nobody sends";
        if (coll::clock::now() - t0 > 250ms) return "wait_for(20ms) took too long";
        try {
          orphan->wait();
          return "the receive finished with no sender";
        } catch (const coll::error& e) {
          if (e.code() != coll::errc::timeout) return std::string("expected a timeout, got: ") + e.what();
        }
        if (coll::clock::now() - t0 > 5s) return "the receive's deadline came late";
      }
      ok.wait();
      if (data[4999] != double(p)) return "the call beside the timed-out one is wrong";
      coll::barrier(c);
      return "";
    });
  }
}

// MPI_Test's promise: a caller that only tests, and never waits, still sees its calls
// end. Some transports (tcp) take messages in only when asked, so test() must ask.
TEST_CASE("calls that are only ever tested, never waited for, finish") {
  for (int p : rank_counts)
    on_ranks(p, [&](comm& c) -> std::string {
      std::vector<std::int64_t> big(40'003, c.rank() + 1), small(7, c.rank());
      std::vector<std::int64_t> gathered(small.size() * std::size_t(p));
      auto reduced = coll::iall_reduce(c, big, coll::sum{});
      auto all = coll::iall_gather(c, small, gathered);
      const auto until = coll::clock::now() + 30s;
      while (!(reduced.test() && all.test()))
        if (coll::clock::now() > until) return "calls only tested did not finish in 30 s";
      if (big.front() != std::int64_t(p) * (p + 1) / 2 || big.back() != big.front()) return "the tested all_reduce is wrong";
      for (std::size_t j = 0; j < gathered.size(); ++j)
        if (gathered[j] != std::int64_t(j / small.size())) return "the tested all_gather is wrong";
      return "";
    });
}
