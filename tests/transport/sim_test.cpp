// The simulated transport (transport/sim.hpp, simulation.hpp): with data, every
// collective under every algorithm gives the serial reference's result at 1 to 64
// ranks; sizes only, the virtual times of ring, halving-doubling, direct and the double
// binary tree agree with textbook closed forms on uniform links; the model's ports and
// straggler behave as documented; bad use is a clear error.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/nonblocking.hpp>
#include <collectives/simulation.hpp>
#include <collectives/transport/sim.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;
using comm = coll::communicator<coll::sim>;
using handle = coll::call_handle<coll::sim>;
using value = std::int64_t;

static_assert(coll::check_transport<coll::sim>());
static_assert(coll::fused_recv_reduce_transport<coll::sim>);
static_assert(coll::lists_finished_requests<coll::sim>);

namespace {

// "" where `got` is within `tolerance` of `want`, relative to it; else both, for the
// failure's message. (doctest's Approx adds 1 to its scale, so at these magnitudes,
// microseconds to milliseconds, it would pass any two times.)
std::string off_by(double got, double want, double tolerance) {
  if (std::fabs(got - want) <= tolerance * std::fabs(want)) return "";
  return std::to_string(got) + " s, expected " + std::to_string(want) + " s";
}

// A user's op: commutative and associative, so every algorithm may use it.
struct gcd_op {
  value operator()(value a, value b) const { return std::gcd(a, b); }
};

// Starts `start(comm, rank)` on every rank of `cluster`, runs the calls to their ends
// and returns the virtual seconds they took.
template <class Start>
double run_on(coll::sim_group& cluster, Start&& start) {
  std::vector<comm> comms;
  comms.reserve(std::size_t(cluster.size()));
  for (int r = 0; r < cluster.size(); ++r) comms.emplace_back(cluster.transport(r));
  std::vector<handle> calls;
  for (int r = 0; r < cluster.size(); ++r) calls.push_back(start(comms[std::size_t(r)], r));
  return cluster.run([&](int r) { return calls[std::size_t(r)].test(); });
}

// Rank r's element i: distinct across ranks and positions, with common factors for gcd.
value element(int r, std::size_t i) { return value(6 * ((r * 7 + int(i) * 3) % 11 + 1)) * (i % 2 ? 5 : 1); }

std::vector<value> input_of(int r, std::size_t n) {
  std::vector<value> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = element(r, i);
  return v;
}

template <class Op>
std::vector<value> reduced(int ranks, std::size_t n, Op op) {
  std::vector<value> out = input_of(0, n);
  for (int r = 1; r < ranks; ++r) {
    const auto in = input_of(r, n);
    for (std::size_t i = 0; i < n; ++i) out[i] = op(out[i], in[i]);
  }
  return out;
}

// One vector of n elements per rank.
std::vector<std::vector<value>> rows(int ranks, std::size_t n = 0, value fill = 0) {
  return std::vector<std::vector<value>>(static_cast<std::size_t>(ranks), std::vector<value>(n, fill));
}

// Hosts of 4 ranks, so that hierarchical has hosts to plan by (the last may be partial),
// with shared bandwidth and leaves of 2 hosts that block: every part of the model runs.
coll::sim_group data_cluster(int ranks) {
  auto model = coll::cluster_model::uniform({.latency_s = 2e-6, .seconds_per_byte = 1e-10, .per_message_s = 1e-7});
  model.ranks_per_host = 4;
  model.on_host.latency_s = 5e-7;
  model.shares_bandwidth = true;
  model.hosts_per_leaf = 2;
  model.oversubscription = 2;
  return coll::sim_group(ranks, model);
}

const int rank_counts[] = {1, 2, 3, 5, 8, 13, 64};
const std::size_t element_counts[] = {0, 1, 7, 1000};

template <class Algorithm, class Op>
void check_all_reduce(Op op) {
  for (int ranks : rank_counts)
    for (std::size_t n : element_counts) {
      CAPTURE(ranks);
      CAPTURE(n);
      auto cluster = data_cluster(ranks);
      auto data = rows(ranks);
      for (int r = 0; r < ranks; ++r) data[std::size_t(r)] = input_of(r, n);
      run_on(cluster, [&](comm& c, int r) { return coll::iall_reduce<Algorithm>(c, data[std::size_t(r)], op); });
      const auto want = reduced(ranks, n, op);
      for (int r = 0; r < ranks; ++r) REQUIRE(data[std::size_t(r)] == want);
    }
}

template <class Algorithm>
void check_reduce_and_broadcast() {
  for (int ranks : rank_counts)
    for (std::size_t n : element_counts) {
      CAPTURE(ranks);
      CAPTURE(n);
      const int root = ranks / 2;
      auto cluster = data_cluster(ranks);
      auto out = rows(ranks, n, -1), in = rows(ranks);
      for (int r = 0; r < ranks; ++r) in[std::size_t(r)] = input_of(r, n);
      run_on(cluster, [&](comm& c, int r) { return coll::ireduce<Algorithm>(c, in[std::size_t(r)], out[std::size_t(r)], coll::sum{}, root); });
      REQUIRE(out[std::size_t(root)] == reduced(ranks, n, coll::sum{}));
      run_on(cluster, [&](comm& c, int r) { return coll::ibroadcast<Algorithm>(c, in[std::size_t(r)], out[std::size_t(r)], root); });
      for (int r = 0; r < ranks; ++r) REQUIRE(out[std::size_t(r)] == in[std::size_t(root)]);
    }
}

template <class Algorithm>
void check_gather_and_scatter_phases() {  // reduce_scatter and all_gather
  for (int ranks : rank_counts)
    for (std::size_t n : element_counts) {
      CAPTURE(ranks);
      CAPTURE(n);
      auto cluster = data_cluster(ranks);
      const std::size_t total = n * std::size_t(ranks);
      auto in = rows(ranks), part = rows(ranks, n);
      for (int r = 0; r < ranks; ++r) in[std::size_t(r)] = input_of(r, total);
      run_on(cluster, [&](comm& c, int r) { return coll::ireduce_scatter<Algorithm>(c, in[std::size_t(r)], part[std::size_t(r)], coll::sum{}); });
      const auto sum = reduced(ranks, total, coll::sum{});
      for (int r = 0; r < ranks; ++r)
        REQUIRE(std::equal(part[std::size_t(r)].begin(), part[std::size_t(r)].end(), sum.begin() + std::ptrdiff_t(n) * r));
      auto all = rows(ranks, total);
      run_on(cluster, [&](comm& c, int r) { return coll::iall_gather<Algorithm>(c, part[std::size_t(r)], all[std::size_t(r)]); });
      for (int r = 0; r < ranks; ++r) REQUIRE(all[std::size_t(r)] == sum);
    }
}

template <class Algorithm>
void check_uneven_phases() {  // reduce_scatterv and all_gatherv, rank r's part r % 3 * n elements
  for (int ranks : rank_counts)
    for (std::size_t n : element_counts) {
      CAPTURE(ranks);
      CAPTURE(n);
      auto cluster = data_cluster(ranks);
      std::vector<std::size_t> counts(static_cast<std::size_t>(ranks));
      for (int r = 0; r < ranks; ++r) counts[std::size_t(r)] = std::size_t(r % 3) * n;
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      auto in = rows(ranks), part = rows(ranks), all = rows(ranks, total);
      for (int r = 0; r < ranks; ++r) {
        in[std::size_t(r)] = input_of(r, total);
        part[std::size_t(r)].resize(counts[std::size_t(r)]);
      }
      run_on(cluster, [&](comm& c, int r) {
        return coll::ireduce_scatterv<Algorithm>(c, in[std::size_t(r)], part[std::size_t(r)], std::span<const std::size_t>(counts), coll::sum{});
      });
      run_on(cluster, [&](comm& c, int r) {
        return coll::iall_gatherv<Algorithm>(c, part[std::size_t(r)], all[std::size_t(r)], std::span<const std::size_t>(counts));
      });
      const auto sum = reduced(ranks, total, coll::sum{});
      for (int r = 0; r < ranks; ++r) REQUIRE(all[std::size_t(r)] == sum);
    }
}

template <class Algorithm>
void check_exchanges() {  // all_to_all, gather, scatter
  for (int ranks : rank_counts)
    for (std::size_t n : element_counts) {
      CAPTURE(ranks);
      CAPTURE(n);
      auto cluster = data_cluster(ranks);
      const std::size_t total = n * std::size_t(ranks);
      const int root = ranks - 1;
      auto in = rows(ranks), out = rows(ranks, total);
      for (int r = 0; r < ranks; ++r) in[std::size_t(r)] = input_of(r, total);
      run_on(cluster, [&](comm& c, int r) { return coll::iall_to_all<Algorithm>(c, in[std::size_t(r)], out[std::size_t(r)]); });
      for (int r = 0; r < ranks; ++r)
        for (int from = 0; from < ranks; ++from)
          for (std::size_t i = 0; i < n; ++i)
            REQUIRE(out[std::size_t(r)][std::size_t(from) * n + i] == in[std::size_t(from)][std::size_t(r) * n + i]);
      run_on(cluster, [&](comm& c, int r) {
        return coll::igather<Algorithm>(c, std::span(in[std::size_t(r)]).first(n), out[std::size_t(r)], root);
      });
      for (int from = 0; from < ranks; ++from)
        for (std::size_t i = 0; i < n; ++i) REQUIRE(out[std::size_t(root)][std::size_t(from) * n + i] == in[std::size_t(from)][i]);
      auto part = rows(ranks, n);
      run_on(cluster, [&](comm& c, int r) { return coll::iscatter<Algorithm>(c, in[std::size_t(r)], part[std::size_t(r)], root); });
      for (int r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < n; ++i) REQUIRE(part[std::size_t(r)][i] == in[std::size_t(root)][std::size_t(r) * n + i]);
    }
}

}  // namespace

TEST_CASE("sim, data: all_reduce under every algorithm equals the serial reference, for sum, max and a user's op") {
  check_all_reduce<coll::ring>(coll::sum{});
  check_all_reduce<coll::double_binary_tree>(coll::max{});
  check_all_reduce<coll::direct>(gcd_op{});
  check_all_reduce<coll::halving_doubling>(coll::sum{});
  check_all_reduce<coll::hierarchical<>>(coll::min{});
  check_all_reduce<coll::automatic>(gcd_op{});
}

TEST_CASE("sim, data: reduce and broadcast under every algorithm") {
  check_reduce_and_broadcast<coll::ring>();
  check_reduce_and_broadcast<coll::double_binary_tree>();
  check_reduce_and_broadcast<coll::direct>();
  check_reduce_and_broadcast<coll::automatic>();
}

TEST_CASE("sim, data: reduce_scatter and all_gather, even and uneven, under every algorithm") {
  check_gather_and_scatter_phases<coll::ring>();
  check_gather_and_scatter_phases<coll::direct>();
  check_gather_and_scatter_phases<coll::halving_doubling>();
  check_gather_and_scatter_phases<coll::automatic>();
  check_uneven_phases<coll::ring>();
  check_uneven_phases<coll::halving_doubling>();
  check_uneven_phases<coll::automatic>();
}

TEST_CASE("sim, data: all_to_all, gather and scatter") {
  check_exchanges<coll::direct>();
  check_exchanges<coll::automatic>();
}

// ---- Sizes only: the textbook closed forms ---------------------------------------------
//
// alpha: a message's latency; beta: seconds per byte; gamma: reduce seconds per byte;
// N: the bytes of the whole vector (all_reduce's buffer, reduce_scatter's input,
// all_gather's output, broadcast's and reduce's buffer); P ranks, one port each that
// sends and receives at once.
//
// Ring, and recursive halving and doubling (Thakur, Rabenseifner and Gropp 2005):
//   ring all_reduce:      2(P-1) alpha + 2 (P-1)/P N beta + (P-1)/P N gamma
//   ring reduce_scatter:   (P-1) alpha +   (P-1)/P N beta + (P-1)/P N gamma
//   ring all_gather:       (P-1) alpha +   (P-1)/P N beta
//   recursive halving and doubling (P a power of two): the same with lg P alpha for
//   each (P-1) alpha.
// N is a multiple of P, so that every part is the same size, and the plans are not
// sliced into a pipeline (the forms have none).
//
// Halving and doubling at any P (the same paper, after MPICH): the E = P - P' ranks
// above P' = 2^floor(lg P) first hand their whole vector to a partner, which reduces
// it, and get their result back at the end; between, P' ranks run the forms above.
//   all_reduce:     2 lg P' alpha + 2 (P'-1)/P' N beta + (P'-1)/P' N gamma
//                   + [E > 0] (2 alpha + 2 N beta + N gamma)
//   reduce_scatter:   lg P' alpha + (P'-1)/P' N (beta + gamma)
//                   + [E > 0] (2 alpha + N (beta + gamma) + N/P beta)
//   all_gather:       lg P' alpha + (P'-1)/P' N beta + [E > 0] (2 alpha + N/P beta + N beta)
// The forms go in lock step; the simulated ranks do not. A rank outside the fold starts
// at once and runs ahead, and a port takes one message at a time in the order they
// come, so a later step's message can hold up an earlier one's: all_reduce comes up to
// 14% above its form (P = 100, 16,384 floats a rank; 1.1% at P = 6, 256 floats). In
// reduce_scatter and all_gather, where E <= P'/2, the partner outside the fold sends at
// once and the folded rank's result goes back alongside the last step: one alpha less
// (25% below at P = 5, a float a rank); and their blocks are the ranks' parts, two for
// a folded pair, so the halving moves more than (P'-1)/P' N (5% above at P = 7, 16,384
// floats a rank). Checked where the forms hold: all_reduce where all ranks but one in
// the steps fold (P = 2^k - 1), which keeps them in step, and with a float a rank, where
// only the latencies count; reduce_scatter and all_gather at P = 127 and 1,023, and with
// a float a rank where E > P'/2.
//
// Direct: every rank sends to each of the P-1 others, all messages posted at once; its
// port sends them one after the other, and a message's latency overlaps the bytes of
// those behind it (LogGP, Alexandrov et al. 1995, with L = alpha, G = beta, o = g = 0:
// P-1 messages of m bytes out of one port take alpha + (P-1) m beta).
//   all_gather:               alpha +   (P-1)/P N beta
//   reduce_scatter:           alpha +   (P-1)/P N beta + (P-1)/P N gamma
//   all_reduce, two rounds: 2 alpha + 2 (P-1)/P N beta + (P-1)/P N gamma
//     (a reduce_scatter, then an all_gather of the reduced parts)
//   all_reduce, one round:    alpha +   (P-1)   N beta + (P-1)   N gamma
//     (every rank sends its whole vector to every other and reduces all P itself)
// direct runs all_reduce in one round up to direct_policy's limit and in two above it.
// It combines what it received as local steps, in rank order, and the model charges
// only reductions made as a message comes in (docs/simulation.md, Limits): its gamma
// terms are not simulated, so direct is checked on links with gamma = 0.
//
// Double binary tree (Sanders, Speck and Traff 2009): each half of the vector goes down,
// or is reduced up, a binary tree of its own; both are in-order trees over the ranks,
// the second shifted by one. The paper mirrors instead of shifting where P is odd; the
// library always shifts, so its deeper tree has h = floor(lg(P + 1)) levels below the
// root, the height of an in-order tree over P + 1 positions. With one float a tree and
// no pipeline only the latencies count:
//   broadcast: h alpha          reduce: (h + 1) alpha          all_reduce: 2 h alpha
// reduce takes a step more: a tree's root hands its half on to the root asked for.
// Pipelined in pieces of s bytes, the paper's broadcast reaches N beta: its root sends
// to the roots of both trees in turn, and each rank forwards pieces in one tree while a
// leaf of the other. The library's root is at the top of both trees and after the
// relabelling ranks are inner in both, so every piece leaves a port twice, as in one
// pipelined binary tree; the last piece then goes down h - 1 more levels, each a
// latency and two pieces through a port:
//   broadcast, pipelined: h alpha + 2 N beta + 2 (h - 1) s beta        (P >= 5)
// (At P <= 4 a tree's root has one child: 1.5 N beta, N beta at P = 2.) Pipelined reduce
// and all_reduce are not checked: their pieces meet in the ports in an order that no
// form follows (reduce 1.5 to 2.5 N beta by P and root, all_reduce 2 to 2.6 N beta,
// where the paper's trees take N beta and 2 N beta).

namespace {

constexpr double alpha = 3e-6, beta = 1.0 / 12e9, gamma_ = 1.0 / 20e9;

struct closed_forms {
  double latency_steps;  // how many alphas
  double beta_parts;     // how many (P-1)/P N betas
  double gamma_parts;    // how many (P-1)/P N gammas
  double at(int p, double bytes) const {
    const double share = double(p - 1) / p * bytes;
    return latency_steps * alpha + beta_parts * share * beta + gamma_parts * share * gamma_;
  }
};

// Floats, not sliced into a pipeline unless `slice_bytes` says so.
struct run_as {
  std::size_t slice_bytes = SIZE_MAX;
  double gamma = gamma_;
  int root = 0;
};

template <class Algorithm, class Kind>
double simulated(Kind kind, int ranks, std::size_t count_per_call, run_as how = {}) {
  coll::sim_group cluster(ranks, coll::cluster_model::uniform({.latency_s = alpha, .seconds_per_byte = beta}, how.gamma),
                          coll::sim_payload::sizes_only);
  const auto r = coll::simulate<Algorithm>(
      cluster, kind, {.count = count_per_call, .element_size = 4, .root = how.root, .slice_bytes = how.slice_bytes});
  return r.seconds;
}

// Each closed form within 1% of the simulation at P ranks, for a vector of N floats.
template <class Algorithm>
void check_forms(int p, std::size_t floats, double steps_each_phase) {
  CAPTURE(p);
  CAPTURE(floats);
  const double bytes = 4.0 * double(floats);
  const closed_forms all_reduce{2 * steps_each_phase, 2, 1}, reduce_scatter{steps_each_phase, 1, 1},
      all_gather{steps_each_phase, 1, 0};
  CHECK(off_by(simulated<Algorithm>(coll::kind::all_reduce{}, p, floats), all_reduce.at(p, bytes), 0.01) == "");
  // reduce_scatter and all_gather count the elements of one rank's part.
  CHECK(off_by(simulated<Algorithm>(coll::kind::reduce_scatter{}, p, floats / std::size_t(p)), reduce_scatter.at(p, bytes), 0.01) == "");
  CHECK(off_by(simulated<Algorithm>(coll::kind::all_gather{}, p, floats / std::size_t(p)), all_gather.at(p, bytes), 0.01) == "");
}

}  // namespace

TEST_CASE("sim, sizes only: ring agrees with its closed forms within 1%") {
  for (int p : {2, 3, 5, 8, 13, 64, 100, 256})
    for (std::size_t per_rank : {std::size_t(1), std::size_t(256), std::size_t(262144)})
      check_forms<coll::ring>(p, per_rank * std::size_t(p), p - 1);
}

TEST_CASE("sim, sizes only: halving and doubling agrees with its closed forms within 1% (powers of two)") {
  for (int p : {2, 4, 8, 64, 1024, 8192})
    for (std::size_t per_rank : {std::size_t(1), std::size_t(256), std::size_t(16384)})
      check_forms<coll::halving_doubling>(p, per_rank * std::size_t(p), std::log2(p));
}

namespace {

// Halving and doubling at P ranks, any P, for a vector of N floats: the forms with the
// fold (above), each within 1%; `phases` false checks all_reduce alone.
void check_halving_doubling(int p, std::size_t floats, bool phases) {
  CAPTURE(p);
  CAPTURE(floats);
  int in_steps = 1;  // P'
  while (in_steps * 2 <= p) in_steps *= 2;
  const bool folds = in_steps < p;
  const double n = 4.0 * double(floats), lg = std::log2(in_steps), share = double(in_steps - 1) / in_steps * n;
  const double all_reduce = 2 * lg * alpha + 2 * share * beta + share * gamma_ +
                            (folds ? 2 * alpha + 2 * n * beta + n * gamma_ : 0);
  const double reduce_scatter = lg * alpha + share * (beta + gamma_) +
                                (folds ? 2 * alpha + n * (beta + gamma_) + n / p * beta : 0);
  const double all_gather = lg * alpha + share * beta + (folds ? 2 * alpha + n / p * beta + n * beta : 0);
  using hd = coll::halving_doubling;
  CHECK(off_by(simulated<hd>(coll::kind::all_reduce{}, p, floats), all_reduce, 0.01) == "");
  if (!phases) return;
  CHECK(off_by(simulated<hd>(coll::kind::reduce_scatter{}, p, floats / std::size_t(p)), reduce_scatter, 0.01) == "");
  CHECK(off_by(simulated<hd>(coll::kind::all_gather{}, p, floats / std::size_t(p)), all_gather, 0.01) == "");
}

// Direct at P ranks, links with gamma = 0 (above), and with gamma at 2 ranks:
// reduce_scatter and all_gather of N floats, and all_reduce of N floats in the schedule
// direct picks for them.
void check_direct(int p, std::size_t floats) {
  CAPTURE(p);
  CAPTURE(floats);
  const run_as no_gamma{.gamma = 0};
  const double n = 4.0 * double(floats), share = double(p - 1) / p * n;
  const bool one_round = n <= double(coll::direct::policy.one_round_all_reduce_max_bytes);
  CAPTURE(one_round);
  const double all_reduce = one_round ? alpha + (p - 1) * n * beta : 2 * alpha + 2 * share * beta;
  CHECK(off_by(simulated<coll::direct>(coll::kind::all_reduce{}, p, floats, no_gamma), all_reduce, 0.01) == "");
  // Its reductions are local steps of the rank's core, each once its part has come: at
  // 2 ranks one, after the only part, as the forms count it; at more, the first overlap
  // the parts still coming.
  const double reducing = (one_round ? (p - 1) * n : share) * gamma_;
  if (p == 2) CHECK(off_by(simulated<coll::direct>(coll::kind::all_reduce{}, p, floats), all_reduce + reducing, 0.01) == "");
  if (floats % std::size_t(p)) return;
  const std::size_t part = floats / std::size_t(p);
  CHECK(off_by(simulated<coll::direct>(coll::kind::reduce_scatter{}, p, part, no_gamma), alpha + share * beta, 0.01) == "");
  CHECK(off_by(simulated<coll::direct>(coll::kind::all_gather{}, p, part, no_gamma), alpha + share * beta, 0.01) == "");
}

// The height of the double binary tree's deeper tree (above).
int tree_height(int p) { return int(std::floor(std::log2(p + 1.0))); }

}  // namespace

TEST_CASE("sim, sizes only: halving and doubling agrees with the folding forms within 1% (any P)") {
  // Where the forms hold (above): reduce_scatter and all_gather of a float a rank where
  // more than half the ranks in the steps fold, of any size at P = 127 and 1,023.
  auto most_fold = [](int p) {
    int in_steps = 1;
    while (in_steps * 2 <= p) in_steps *= 2;
    return 2 * (p - in_steps) > in_steps;
  };
  for (int p : {3, 7, 15, 127, 1023})  // every rank in the steps but one folds
    for (std::size_t per_rank : {std::size_t(1), std::size_t(256), std::size_t(16384)})
      check_halving_doubling(p, per_rank * std::size_t(p), p >= 127 || (per_rank == 1 && most_fold(p)));
  for (int p : {5, 6, 9, 12, 13, 100, 1000}) check_halving_doubling(p, std::size_t(p), most_fold(p));
}

TEST_CASE("sim, sizes only: direct agrees with its closed forms within 1%") {
  for (int p : {2, 3, 5, 8, 13, 64, 100}) {
    // all_reduce in one round: the smallest vector and the largest that direct runs so.
    check_direct(p, 1);
    check_direct(p, coll::direct::policy.one_round_all_reduce_max_bytes / 4);
    // Whole parts: reduce_scatter and all_gather too, all_reduce in one or two rounds.
    for (std::size_t per_rank : {std::size_t(1), std::size_t(256), std::size_t(4096), std::size_t(65536)})
      check_direct(p, per_rank * std::size_t(p));
  }
}

TEST_CASE("sim, sizes only: the double binary tree agrees with its closed forms within 1%") {
  // Two floats, one a tree, no pipeline: the latencies of the trees' heights.
  for (int p : {2, 3, 4, 5, 7, 8, 13, 64, 100, 1000, 8192}) {
    CAPTURE(p);
    const int h = tree_height(p);
    const run_as at_middle{.root = p / 2};
    using tree = coll::double_binary_tree;
    CHECK(off_by(simulated<tree>(coll::kind::broadcast{}, p, 2, at_middle), h * alpha, 0.01) == "");
    CHECK(off_by(simulated<tree>(coll::kind::reduce{}, p, 2, at_middle), (h + 1) * alpha, 0.01) == "");
    CHECK(off_by(simulated<tree>(coll::kind::all_reduce{}, p, 2), 2 * h * alpha, 0.01) == "");
  }
  // Broadcast pipelined: 16 MiB in pieces of 64 KiB (128 a tree).
  const std::size_t floats = std::size_t(4) << 20, piece = 64 << 10;
  for (int p : {5, 6, 8, 13, 64, 100}) {
    CAPTURE(p);
    const int h = tree_height(p);
    const double n = 4.0 * double(floats), want = h * alpha + 2 * n * beta + 2 * (h - 1) * double(piece) * beta;
    CHECK(off_by(simulated<coll::double_binary_tree>(coll::kind::broadcast{}, p, floats, {.slice_bytes = piece, .root = p / 2}),
                 want, 0.01) == "");
  }
}

TEST_CASE("sim: ports, hosts and a straggler") {
  // Two ranks, one message of 1 MB each way: latency plus the bytes, ports overlapping.
  const coll::sim_link link{.latency_s = 1e-6, .seconds_per_byte = 1e-9};
  auto broadcast_time = [&](coll::cluster_model model, int ranks) {
    coll::sim_group cluster(ranks, model, coll::sim_payload::sizes_only);
    return coll::simulate<coll::direct>(cluster, coll::kind::broadcast{}, {.count = 250000, .element_size = 4}).seconds;
  };
  CHECK(off_by(broadcast_time(coll::cluster_model::uniform(link), 2), 1e-6 + 1e-3, 1e-6) == "");
  // The root's port sends one message at a time: direct's broadcast to 4 ranks is 3 in a row.
  CHECK(off_by(broadcast_time(coll::cluster_model::uniform(link), 4), 1e-6 + 3e-3, 1e-6) == "");
  // On one host the on-host link is used.
  auto two_classes = coll::cluster_model::uniform(link);
  two_classes.ranks_per_host = 2;
  two_classes.on_host = {.latency_s = 1e-7, .seconds_per_byte = 1e-10};
  CHECK(off_by(broadcast_time(two_classes, 2), 1e-7 + 1e-4, 1e-6) == "");
  // A straggling receiver takes its bytes at a third of the speed.
  auto slow = coll::cluster_model::uniform(link);
  slow.slow_rank = 1;
  slow.slow_factor = 3;
  CHECK(off_by(broadcast_time(slow, 2), 1e-6 + 3e-3, 1e-6) == "");
  // and a straggling sender sends them at that speed, however fast the receiver.
  slow.slow_rank = 0;
  CHECK(off_by(broadcast_time(slow, 2), 1e-6 + 3e-3, 1e-6) == "");
  // A slow link to the other hosts, at either end, takes the bytes at a quarter of the
  // speed; between two other ranks, or on its host, it is not in the way.
  for (int slow_end : {0, 1}) {
    auto slow_link = coll::cluster_model::uniform(link);
    slow_link.slow_link_rank = slow_end;
    slow_link.slow_link_factor = 4;
    CHECK(off_by(broadcast_time(slow_link, 2), 1e-6 + 4e-3, 1e-6) == "");
    slow_link.shares_bandwidth = true;
    CHECK(off_by(broadcast_time(slow_link, 2), 1e-6 + 4e-3, 1e-6) == "");
    slow_link.slow_link_rank = 2 + slow_end;
    CHECK(off_by(broadcast_time(slow_link, 2), 1e-6 + 1e-3, 1e-6) == "");
    two_classes.slow_link_rank = slow_end;
    two_classes.slow_link_factor = 4;
    CHECK(off_by(broadcast_time(two_classes, 2), 1e-7 + 1e-4, 1e-6) == "");
  }
  // With a NIC per host, the host's NIC is the slow link of each of its ranks.
  auto slow_host = coll::cluster_model::uniform(link);
  slow_host.ranks_per_host = 2;
  slow_host.on_host = {.latency_s = 1e-7, .seconds_per_byte = 1e-12};
  slow_host.shares_bandwidth = slow_host.nic_per_host = true;
  slow_host.slow_link_rank = 3;
  slow_host.slow_link_factor = 4;
  // direct's broadcast from rank 0 sends to rank 2 and 3 across hosts: both through
  // host 1's NIC, at a quarter of the speed, sharing it: 8 ms.
  CHECK(off_by(broadcast_time(slow_host, 4), 1e-6 + 8e-3, 0.01) == "");
  // The ring crosses hosts: nvlink_hosts' ring all_reduce of 64 MiB at 16 ranks is
  // bound by the NIC, and slower than at 8 ranks, where NVLink carries it all.
  auto ring_time = [](int ranks) {
    coll::sim_group cluster(ranks, coll::cluster_model::nvlink_hosts(), coll::sim_payload::sizes_only);
    return coll::simulate<coll::ring>(cluster, coll::kind::all_reduce{}, {.count = 16 << 20}).seconds;
  };
  CHECK(ring_time(16) > 5 * ring_time(8));
  // A memory figure: a byte of a call of 32 MiB or more costs it, of 512 KiB or less the
  // link's own figure, and halfway between by the logarithm (4 MiB) halfway between them.
  auto from_memory = coll::cluster_model::uniform({.latency_s = 1e-6, .seconds_per_byte = 1e-10, .memory_seconds_per_byte = 3e-10});
  const auto broadcast_of = [&](std::size_t bytes) {
    coll::sim_group cluster(2, from_memory, coll::sim_payload::sizes_only);
    return coll::simulate<coll::direct>(cluster, coll::kind::broadcast{}, {.count = bytes / 4, .element_size = 4}).seconds;
  };
  CHECK(off_by(broadcast_of(512 << 10), 1e-6 + (512 << 10) * 1e-10, 1e-6) == "");
  CHECK(off_by(broadcast_of(4 << 20), 1e-6 + (4 << 20) * 2e-10, 1e-6) == "");
  CHECK(off_by(broadcast_of(32 << 20), 1e-6 + (32 << 20) * 3e-10, 1e-6) == "");
  CHECK(off_by(broadcast_of(64 << 20), 1e-6 + (64 << 20) * 3e-10, 1e-6) == "");
  // With a figure at 4 MiB too, each size between two of the three by the logarithm;
  // a call in place streams through half its bytes.
  from_memory.on_host.middle_seconds_per_byte = from_memory.across_hosts.middle_seconds_per_byte = 1.5e-10;
  const auto broadcast_at = [&](std::size_t bytes, bool in_place) {
    coll::sim_group cluster(2, from_memory, coll::sim_payload::sizes_only);
    return coll::simulate<coll::direct>(cluster, coll::kind::broadcast{}, {.count = bytes / 4, .in_place = in_place}).seconds;
  };
  CHECK(off_by(broadcast_at(2 << 20, false), 1e-6 + (2 << 20) * (1e-10 + 0.5e-10 * 2 / 3), 1e-6) == "");
  CHECK(off_by(broadcast_at(4 << 20, false), 1e-6 + (4 << 20) * 1.5e-10, 1e-6) == "");
  CHECK(off_by(broadcast_at(16 << 20, false), 1e-6 + (16 << 20) * 2.5e-10, 1e-6) == "");
  CHECK(off_by(broadcast_at(8 << 20, true), 1e-6 + (8 << 20) * 1.5e-10, 1e-6) == "");
  CHECK(off_by(broadcast_at(64 << 20, true), 1e-6 + (64 << 20) * 3e-10, 1e-6) == "");
}

TEST_CASE("sim: a rank's core: local steps, and reductions as the bytes come") {
  // 1 MB a rank, links of 1 GB/s: a copy at 0.2 ns a byte, a reduction at 0.5 ns.
  const coll::sim_link link{.latency_s = 1e-6, .seconds_per_byte = 1e-9};
  const double copying = 2e-10, reducing = 5e-10, n = 1e6;
  auto model = coll::cluster_model::uniform(link, reducing);
  model.copy_seconds_per_byte = copying;
  const auto seconds = [](const coll::cluster_model& m, int ranks, auto algorithm, bool in_place = false) {
    coll::sim_group cluster(ranks, m, coll::sim_payload::sizes_only);
    return coll::simulate<decltype(algorithm)>(cluster, coll::kind::all_reduce{}, {.count = 250000, .in_place = in_place})
        .seconds;
  };
  // One rank: the input copied to the output, or nothing in place.
  CHECK(off_by(seconds(model, 1, coll::ring{}), n * copying, 1e-6) == "");
  CHECK(seconds(model, 1, coll::ring{}, true) == 0);
  // Copies and reductions of one core take turns: direct at 2 ranks sends half its
  // input, reduces the half it got onto its own half, then sends that. In place its own
  // half is where it stays; out of place it is copied to the output first, which, at
  // 2 ns a byte, ends after the other half has come: the reduction waits for it.
  CHECK(off_by(seconds(model, 2, coll::direct{}, true), 2e-6 + n * 1e-9 + n / 2 * reducing, 1e-6) == "");
  auto slow_copies = model;
  slow_copies.copy_seconds_per_byte = 2e-9;
  CHECK(off_by(seconds(slow_copies, 2, coll::direct{}), n / 2 * 2e-9 + n / 2 * reducing + 1e-6 + n / 2 * 1e-9, 1e-6) == "");
  // ring at 2 ranks reduces the half it receives, after it, or as its bytes come: then
  // the reduction, faster than the link, ends with the last byte.
  CHECK(off_by(seconds(model, 2, coll::ring{}, true), 2e-6 + n * 1e-9 + n / 2 * reducing, 1e-6) == "");
  model.reduces_as_bytes_arrive = true;
  CHECK(off_by(seconds(model, 2, coll::ring{}, true), 2e-6 + n * 1e-9, 1e-6) == "");
  // One slower than the link ends its own time after the first byte.
  model.reduce_seconds_per_byte = 3e-9;
  CHECK(off_by(seconds(model, 2, coll::ring{}, true), 2e-6 + n / 2 * 1e-9 + n / 2 * 3e-9, 1e-6) == "");
  // A call out of the caches: the core's steps are as much dearer as the on-host link's bytes.
  auto from_memory = coll::cluster_model::uniform({.latency_s = 0, .seconds_per_byte = 1e-10, .memory_seconds_per_byte = 3e-10});
  from_memory.copy_seconds_per_byte = copying;
  coll::sim_group alone(1, from_memory, coll::sim_payload::sizes_only);
  CHECK(off_by(coll::simulate<coll::ring>(alone, coll::kind::all_reduce{}, {.count = 16 << 20}).seconds, (64 << 20) * copying * 3,
               1e-6) == "");
}

TEST_CASE("sim: shared bandwidth: a host's NIC, a leaf's uplinks") {
  // 1 MB parts, links of 1 GB/s, no latency: a part takes 1 ms on a link of its own.
  auto model = coll::cluster_model::uniform({.latency_s = 0, .seconds_per_byte = 1e-9});
  model.shares_bandwidth = true;
  model.on_host.seconds_per_byte = 1e-12;  // on the host, next to free
  auto all_to_all_time = [](coll::cluster_model m, int ranks) {
    coll::sim_group cluster(ranks, m, coll::sim_payload::sizes_only);
    return coll::simulate<coll::direct>(cluster, coll::kind::all_to_all{}, {.count = 250000, .element_size = 4}).seconds;
  };
  // 2 hosts of 2: each rank sends 2 parts across. A NIC each: 2 ms; one NIC per host,
  // which carries 4 parts: 4 ms.
  auto hosts = model;
  hosts.ranks_per_host = 2;
  CHECK(off_by(all_to_all_time(hosts, 4), 2e-3, 0.01) == "");
  hosts.nic_per_host = true;
  CHECK(off_by(all_to_all_time(hosts, 4), 4e-3, 0.01) == "");
  // 4 hosts of 1 in leaves of 2: each rank sends 3 parts, 2 of them to the other leaf.
  // Not oversubscribed: the NICs bound it, 3 ms. At 2:1 the leaf's uplinks carry one
  // NIC's bandwidth for 4 parts: 4 ms. At 4:1: 8 ms.
  auto leaves = model;
  leaves.hosts_per_leaf = 2;
  CHECK(off_by(all_to_all_time(leaves, 4), 3e-3, 0.01) == "");
  leaves.oversubscription = 2;
  CHECK(off_by(all_to_all_time(leaves, 4), 4e-3, 0.01) == "");
  leaves.oversubscription = 4;
  CHECK(off_by(all_to_all_time(leaves, 4), 8e-3, 0.01) == "");
  // Shared fairly: 3 parts out of one port end together (3 ms), where a port that sends
  // one at a time ends them at 1, 2 and 3 ms: the same total.
  coll::sim_group one_port(4, model, coll::sim_payload::sizes_only);
  CHECK(off_by(coll::simulate<coll::direct>(one_port, coll::kind::broadcast{}, {.count = 250000}).seconds, 3e-3, 0.01) ==
        "");
}

TEST_CASE("sim: bad use is a clear error") {
  coll::sim_group cluster(2, coll::cluster_model::uniform({}));
  comm c(cluster.transport(0));
  std::vector<value> v(4, 1);
  // A blocking call would wait, and a simulated rank cannot: the error says what to do.
  CHECK_THROWS_WITH_AS(coll::all_reduce(c, v, coll::sum{}), doctest::Contains("cannot wait"), coll::error);
  CHECK_THROWS_AS(coll::sim_group(0), coll::error);
  CHECK_THROWS_AS(cluster.transport(2), coll::error);
  auto bad = coll::cluster_model::uniform({.latency_s = -1});
  CHECK_THROWS_WITH_AS(coll::sim_group(2, bad), doctest::Contains("latency"), coll::error);
  auto below_one = coll::cluster_model::nvlink_hosts_oversubscribed(0.5);
  CHECK_THROWS_WITH_AS(coll::sim_group(2, below_one), doctest::Contains("oversubscription"), coll::error);
  CHECK_THROWS_WITH_AS(coll::simulate<coll::ring>(cluster, coll::kind::all_reduce{}, {.count = 4}),
                       doctest::Contains("sizes_only"), coll::error);
  // A rank whose peer never takes part: the calls time out at their deadline, in virtual time.
  coll::sim_group pair(2, coll::cluster_model::uniform({}));
  comm a(pair.transport(0)), b(pair.transport(1));
  std::vector<value> x(4, 1);
  handle h = coll::iall_reduce(a, x, coll::sum{});
  CHECK_THROWS_WITH_AS(pair.run([&](int r) { return r == 1 || h.test(); }), doctest::Contains("timed out"), coll::error);
}
