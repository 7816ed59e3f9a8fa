// Collectives on device buffers, checked against the serial references of the
// collective grids (tests/collectives/harness.hpp). One body, two backends: host
// memory standing in for device memory (standin/, runs everywhere) and CUDA (cuda/,
// label gpu). Each process is one rank of a collectives-run job.
#pragma once

#include <algorithm>
#include <numeric>

#include "../collectives/harness.hpp"
#include "../collectives/sums.hpp"
#include "device_ops.hpp"

namespace testing {

// The grids' counts less the largest, which all_reduce alone runs (the device
// path's chunking is the same for every collective).
inline std::vector<std::size_t> small_counts(int p) {
  auto n = element_counts(p);
  n.pop_back();
  return n;
}

// all_reduce with algorithm A, op Op on T, N elements, in place or not.
template <class A, class T, class Op>
std::string all_reduce_case(comm& c, std::size_t n, bool in_place) {
  const auto given = all_inputs<T, Op>(c.size(), n);
  const auto want = reduced<T, Op>(given);
  device_vector<T> in{std::span<const T>(given[std::size_t(c.rank())])};
  std::vector<T> got;
  if (in_place) {
    coll::all_reduce<A>(c, in.span(), Op{});
    got = in.to_host();
  } else {
    device_vector<T> out(n);
    coll::all_reduce<A>(c, in.span(), out.span(), Op{});
    got = out.to_host();
  }
  return mismatch<T>(got, want, describe<A, T, Op>(c.size(), n, in_place));
}

template <class T, class Op>
void all_reduce_every_algorithm(std::size_t n) {
  each_algorithm<coll::kind::all_reduce>([&]<class A>() {
    if constexpr (A::preserves_rank_order || coll::is_commutative_v<Op>)
      for (bool in_place : {false, true})
        on_ranks(world().size(), [&](comm& c) { return all_reduce_case<A, T, Op>(c, n, in_place); });
  });
}

TEST_CASE("device all_reduce: every built-in op, every algorithm, in place and not") {
  const int p = world().size();
  for (std::size_t n : small_counts(p)) {
    each_builtin_op<std::int32_t>([&]<class Op>() { all_reduce_every_algorithm<std::int32_t, Op>(n); });
    each_builtin_op<float>([&]<class Op>() { all_reduce_every_algorithm<float, Op>(n); });
    all_reduce_every_algorithm<double, coll::sum>(n);
    all_reduce_every_algorithm<std::int64_t, coll::max>(n);
  }
}

TEST_CASE("device all_reduce: 2^20+3 elements, more than the inbox holds") {
  all_reduce_every_algorithm<float, coll::sum>(element_counts(world().size()).back());
}

TEST_CASE("device all_reduce: user ops on user types, commutative and not") {
  for (std::size_t n : small_counts(world().size())) {
    all_reduce_every_algorithm<scored, device_arg_max>(n);
    all_reduce_every_algorithm<mat2, device_mat_mul>(n);
  }
}

TEST_CASE("device reduce, reduce_scatter and reduce_scatterv match the serial reference") {
  const int p = world().size();
  using T = std::int32_t;
  using Op = coll::sum;
  for (std::size_t n : small_counts(p)) {
    const auto given = all_inputs<T, Op>(p, n * std::size_t(p));
    const auto want = reduced<T, Op>(given);
    on_ranks(p, [&](comm& c) {
      const auto r = std::size_t(c.rank());
      std::string problem;
      {  // reduce to the last rank
        device_vector<T> in{std::span<const T>(given[r])}, out(n * std::size_t(p));
        coll::reduce(c, in.span(), out.span(), Op{}, p - 1);
        if (c.rank() == p - 1) problem += mismatch<T>(out.to_host(), want, "reduce");
      }
      {  // reduce_scatter, out of place and in place
        device_vector<T> in{std::span<const T>(given[r])}, out(n);
        coll::reduce_scatter(c, in.span(), out.span(), Op{});
        const std::span<const T> mine = std::span(want).subspan(r * n, n);
        problem += mismatch<T>(out.to_host(), mine, "reduce_scatter");
        coll::reduce_scatter(c, in.span(), Op{});
        problem += mismatch<T>(std::span<const T>(in.to_host()).subspan(r * n, n), mine, "reduce_scatter in place");
      }
      {  // reduce_scatterv with uneven parts
        const auto counts = uneven_counts(p, n);
        const auto displ = coll::plan::displacements(counts);
        const auto uneven_given = all_inputs<T, Op>(p, displ.back());
        const auto uneven_want = reduced<T, Op>(uneven_given);
        device_vector<T> in{std::span<const T>(uneven_given[r])}, out(counts[r]);
        coll::reduce_scatterv(c, in.span(), out.span(), counts, Op{});
        problem += mismatch<T>(out.to_host(), std::span(uneven_want).subspan(displ[r], counts[r]), "reduce_scatterv");
      }
      return problem;
    });
  }
}

// all_reduce through an accumulator, in place and not: bf16 with a float accumulator
// against the exact sum rounded once, float's reproducible_sum against the fixed-point
// sum computed another way, the same bits the host gives.
template <class A>
std::string accumulated_all_reduce_case(comm& c, std::size_t n) {
  const auto r = std::size_t(c.rank());
  std::string problem;
  const auto narrow = unit_inputs<coll::bf16>(c.size(), n, unsigned(n + 3));
  const auto wide = coll::accumulate_as<float>(coll::sum{});
  device_vector<coll::bf16> in{std::span<const coll::bf16>(narrow[r])}, out(n);
  coll::all_reduce<A>(c, in.span(), out.span(), wide);
  problem += mismatch<coll::bf16>(out.to_host(), rounded_once(narrow, n), "accumulate_as<float>");
  coll::all_reduce<A>(c, in.span(), wide);
  problem += mismatch<coll::bf16>(in.to_host(), rounded_once(narrow, n), "accumulate_as<float> in place");
  const auto mixed = random_inputs<float>(c.size(), n, unsigned(n + 5));
  const coll::reproducible_sum exact;
  device_vector<float> values{std::span<const float>(mixed[r])}, sums(n);
  coll::all_reduce<A>(c, values.span(), sums.span(), exact);
  problem += mismatch<float>(sums.to_host(), fixed_point_sum(mixed, n, exact.max_terms), "reproducible_sum");
  return problem;
}

TEST_CASE("device all_reduce through an accumulator: the host's bits under every algorithm") {
  for (std::size_t n : small_counts(world().size()))
    each_algorithm<coll::kind::all_reduce>([&]<class A>() {
      on_ranks(world().size(), [&](comm& c) { return accumulated_all_reduce_case<A>(c, n); });
    });
}

TEST_CASE("device reduce and reduce_scatterv through an accumulator, parts that split reproducible_sum's blocks") {
  const int p = world().size();
  on_ranks(p, [&](comm& c) {
    const auto r = std::size_t(c.rank());
    std::string problem;
    const std::size_t n = 1000;
    const auto mixed = random_inputs<float>(p, n, 11);
    const coll::reproducible_sum exact;
    const auto want = fixed_point_sum(mixed, n, exact.max_terms);
    device_vector<float> in{std::span<const float>(mixed[r])}, out(n);
    coll::reduce(c, in.span(), out.span(), exact, p - 1);
    if (c.rank() == p - 1) problem += mismatch<float>(out.to_host(), want, "reduce");
    const auto counts = uneven_counts(p, n / std::size_t(2 * p));  // parts not on blocks' bounds
    const auto displ = coll::plan::displacements(counts);
    std::vector<std::vector<float>> firsts;
    for (const auto& v : mixed) firsts.emplace_back(v.begin(), v.begin() + std::ptrdiff_t(displ.back()));
    const auto want_parts = fixed_point_sum(firsts, displ.back(), exact.max_terms);
    device_vector<float> all{std::span<const float>(firsts[r])}, part(counts[r]);
    coll::reduce_scatterv(c, all.span(), part.span(), counts, exact);
    problem += mismatch<float>(part.to_host(), std::span(want_parts).subspan(displ[r], counts[r]), "reduce_scatterv");
    const auto narrow = unit_inputs<coll::bf16>(p, n, 13);
    device_vector<coll::bf16> narrow_in{std::span<const coll::bf16>(narrow[r])}, narrow_out(n);
    coll::reduce(c, narrow_in.span(), narrow_out.span(), coll::accumulate_as<float>(coll::avg{}), 0);
    std::vector<coll::bf16> mean(n);
    for (std::size_t i = 0; i < n; ++i) {
      float total = 0;  // exact (sums.hpp's unit_inputs)
      for (const auto& v : narrow) total += float(v[i]);
      mean[i] = coll::bf16(total / float(p));
    }
    if (c.rank() == 0) problem += mismatch<coll::bf16>(narrow_out.to_host(), mean, "reduce of accumulate_as<float>(avg)");
    return problem;
  });
}

// Rank r's part of the data-movement tests: n values that say whose they are.
template <class T>
std::vector<T> part_of(int rank, std::size_t n, std::size_t salt = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T(mix(rank, i + salt) % 1000003);
  return v;
}

TEST_CASE("device broadcast, gather, scatter, all_gather(v) and all_to_all move every part where it belongs") {
  const int p = world().size();
  using T = std::int64_t;
  for (std::size_t n : small_counts(p)) {
    on_ranks(p, [&](comm& c) {
      const int rank = c.rank();
      const auto r = std::size_t(rank);
      const auto P = std::size_t(p);
      std::vector<T> every;  // every rank's part, in rank order
      for (int q = 0; q < p; ++q) {
        const auto part = part_of<T>(q, n);
        every.insert(every.end(), part.begin(), part.end());
      }
      std::string problem;
      {  // broadcast from the middle rank
        const int root = p / 2;
        device_vector<T> data{std::span<const T>(rank == root ? part_of<T>(root, n) : std::vector<T>(n))};
        coll::broadcast(c, data.span(), root);
        problem += mismatch<T>(data.to_host(), part_of<T>(root, n), "broadcast");
      }
      {  // gather to rank 0, out of place and in place
        const auto mine = part_of<T>(rank, n);
        device_vector<T> in{std::span<const T>(mine)}, out(n * P);
        coll::gather(c, in.span(), out.span(), 0);
        if (rank == 0) problem += mismatch<T>(out.to_host(), every, "gather");
        std::vector<T> placed(n * P);
        std::copy(mine.begin(), mine.end(), placed.begin() + std::ptrdiff_t(r * n));
        device_vector<T> all{std::span<const T>(placed)};
        coll::gather(c, all.span(), 0);
        if (rank == 0) problem += mismatch<T>(all.to_host(), every, "gather in place");
      }
      {  // scatter from the last rank
        device_vector<T> in{std::span<const T>(rank == p - 1 ? every : std::vector<T>(n * P))}, out(n);
        coll::scatter(c, in.span(), out.span(), p - 1);
        problem += mismatch<T>(out.to_host(), part_of<T>(rank, n), "scatter");
      }
      {  // all_gather, out of place and in place, and all_gatherv with uneven parts
        device_vector<T> in{std::span<const T>(part_of<T>(rank, n))}, out(n * P);
        coll::all_gather(c, in.span(), out.span());
        problem += mismatch<T>(out.to_host(), every, "all_gather");
        std::vector<T> placed(n * P);
        const auto mine = part_of<T>(rank, n);
        std::copy(mine.begin(), mine.end(), placed.begin() + std::ptrdiff_t(r * n));
        device_vector<T> all{std::span<const T>(placed)};
        coll::all_gather(c, all.span());
        problem += mismatch<T>(all.to_host(), every, "all_gather in place");

        const auto counts = uneven_counts(p, n);
        std::vector<T> uneven_every;
        for (int q = 0; q < p; ++q) {
          const auto part = part_of<T>(q, counts[std::size_t(q)], 7);
          uneven_every.insert(uneven_every.end(), part.begin(), part.end());
        }
        device_vector<T> vin{std::span<const T>(part_of<T>(rank, counts[r], 7))}, vout(uneven_every.size());
        coll::all_gatherv(c, vin.span(), vout.span(), counts);
        problem += mismatch<T>(vout.to_host(), uneven_every, "all_gatherv");
      }
      {  // all_to_all: part j of rank i ends as part i of rank j
        std::vector<T> mine(n * P), want(n * P);
        for (std::size_t j = 0; j < P; ++j) {
          const auto to_j = part_of<T>(rank, n, 1000 * j);
          std::copy(to_j.begin(), to_j.end(), mine.begin() + std::ptrdiff_t(j * n));
          const auto from_j = part_of<T>(int(j), n, 1000 * r);
          std::copy(from_j.begin(), from_j.end(), want.begin() + std::ptrdiff_t(j * n));
        }
        device_vector<T> in{std::span<const T>(mine)}, out(n * P);
        coll::all_to_all(c, in.span(), out.span());
        problem += mismatch<T>(out.to_host(), want, "all_to_all");
      }
      return problem;
    });
  }
}

TEST_CASE("device send and recv: a ring of messages, and one the receiver is late for") {
  const int p = world().size();
  if (p == 1) return;
  for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(300'001)}) {
    on_ranks(p, [&](comm& c) {
      const int next = (c.rank() + 1) % p, prev = (c.rank() + p - 1) % p;
      device_vector<float> out{std::span<const float>(part_of<float>(c.rank(), n))}, in(n);
      // Even ranks send first and odd ones receive first, so some messages arrive
      // before their receive is posted (and wait in the receiver's inbox).
      if (c.rank() % 2 == 0) {
        coll::send(c, out.span(), next, 3);
        coll::recv(c, in.span(), prev, 3);
      } else {
        coll::recv(c, in.span(), prev, 3);
        coll::send(c, out.span(), next, 3);
      }
      return mismatch<float>(in.to_host(), part_of<float>(prev, n), "recv from rank " + std::to_string(prev));
    });
  }
}

TEST_CASE("device recv: a message longer than the receive fails it, and the communicator goes on") {
  const int p = world().size();
  if (p == 1) return;
  on_ranks(p, [&](comm& c) -> std::string {
    std::string problem;
    if (c.rank() == 0) {
      device_vector<float> eight{std::span<const float>(part_of<float>(0, 8))};
      coll::send(c, eight.span(), 1, 5);
    } else if (c.rank() == 1) {
      device_vector<float> four(4);
      try {
        coll::recv(c, four.span(), 0, 5);
        problem = "a receive of 4 floats took a message of 8";
      } catch (const coll::error& e) {
        if (e.code() != coll::errc::message_truncated) problem = std::string("expected message_truncated, got: ") + e.what();
      }
    }
    coll::barrier(c);
    return problem + all_reduce_case<coll::ring, float, coll::sum>(c, 100'003, false);
  });
}

TEST_CASE("device recv: a message that never comes times out, and the communicator goes on") {
  const int p = world().size();
  if (p == 1) return;
  on_ranks(p, [&](comm& c) -> std::string {
    if (c.rank() == 0) {
      device_vector<float> in(4);
      coll::scoped_timeout guard(c, std::chrono::milliseconds(300));
      try {
        coll::recv(c, in.span(), 1, 99);
        return "a receive nobody sends to returned";
      } catch (const coll::error& e) {
        if (e.code() != coll::errc::timeout) return std::string("expected a timeout, got: ") + e.what();
      }
    }
    coll::barrier(c);
    return all_reduce_case<coll::automatic, float, coll::sum>(c, 1000, false);
  });
}

}  // namespace testing
