// The timing and checking loop both perf programs share. A Backend runs one call of
// a collective and offers what the loop needs around it:
//
//   int rank(), size();
//   void barrier();
//   double max_over_ranks(double);  long long sum_over_ranks(long long);
//   run_description describe();
//   template <collective C, class T, op_kind K>
//     void call(std::span<const T> input, std::span<T> output, int root);  // out-of-place
//   template <collective C, class T, op_kind K>
//     void call_in_place(std::span<T> data, int root);
//   static constexpr bool reduce_scatter_in_place_result_at_own_part;
//     // true: rank i's in-place reduce_scatter result lands at i*N (this library);
//     // false: at the front of the buffer (MPI_Reduce_scatter_block with MPI_IN_PLACE)
//
// A backend whose calls run on buffers of its own (device memory: ours_device.hpp)
// also offers upload and download (the concept below). Its call and call_in_place
// then take the host spans for their sizes only. The copies stay out of the timed loop.
//
// Plain standard C++: no library or MPI header here.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collective.hpp"
#include "data.hpp"
#include "options.hpp"
#include "report.hpp"

namespace perf {

template <class Backend, class T>
concept owns_buffers = requires(Backend& b, std::span<const T> in, std::span<T> out) {
  b.template upload<T>(in, in);   // the host input and output into its own buffers
  b.template download<T>(out);    // its output back into the host output
};

// Where one rank's result lies in its output (or in-place) buffer, and which element
// of which rank's input each result element must equal.
template <collective C>
struct result_map {
  layout l;
  int ranks, rank, root;
  bool in_place, at_own_part;

  // The offset and length of the result in the buffer; length 0 where this rank has none.
  std::size_t offset() const {
    if (C == collective::reduce_scatter || C == collective::scatter)
      return in_place && (C == collective::scatter || at_own_part) ? std::size_t(rank) * l.part : 0;
    return 0;
  }
  std::size_t length() const {
    if (result_on_root_only(C) && rank != root) return 0;
    if (C == collective::reduce_scatter || C == collective::scatter) return l.part;
    return l.count;
  }

  // The expected value of result element j.
  template <op_kind K, class T>
  T expected(std::size_t j) const {
    const std::size_t p = l.part ? l.part : 1;
    switch (C) {
      case collective::all_reduce:
      case collective::reduce: return reduced_value<K, T>(ranks, j);
      case collective::reduce_scatter: return reduced_value<K, T>(ranks, std::size_t(rank) * l.part + j);
      case collective::broadcast: return input_value<K, T>(root, j);
      case collective::all_gather:
      case collective::gather: return input_value<K, T>(int(j / p), j % p);
      case collective::all_to_all: return input_value<K, T>(int(j / p), std::size_t(rank) * l.part + j % p);
      case collective::scatter: return input_value<K, T>(root, std::size_t(rank) * l.part + j);
    }
    return T{};
  }
};

// Fills one rank's buffers before a call: its input from the generator (`value`),
// outputs and parts that others will fill with unwritten<T>().
template <collective C, class T, class Value>
void fill(const layout& l, int rank, int root, bool in_place, std::vector<T>& input, std::vector<T>& output,
          Value value) {
  if (!in_place) {
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = value(rank, i);
    for (auto& x : output) x = unwritten<T>();
    return;
  }
  // The in-place buffer: this rank's part at rank*N for the gathers, the root's data
  // for broadcast and scatter, the whole input otherwise.
  std::vector<T>& data = output;
  for (auto& x : data) x = unwritten<T>();
  if (C == collective::all_gather || C == collective::gather) {
    for (std::size_t k = 0; k < l.part; ++k) data[std::size_t(rank) * l.part + k] = value(rank, k);
  } else if ((C == collective::broadcast || C == collective::scatter) && rank != root) {
    return;
  } else {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = value(rank, i);
  }
}

// Seconds per call of `iterations` calls back to back: timed as one, or as `batches`
// batches (1 to `iterations`; calls shared out as evenly as they go) whose median per
// call is taken.
template <class Call>
double timed_calls(int iterations, int batches, Call&& call) {
  using clock = std::chrono::steady_clock;
  std::vector<double> per_call;
  for (int k = 0; k < batches; ++k) {
    const int calls = iterations / batches + (k < iterations % batches ? 1 : 0);
    const auto start = clock::now();
    for (int i = 0; i < calls; ++i) call();
    per_call.push_back(std::chrono::duration<double>(clock::now() - start).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  const std::size_t n = per_call.size();
  return n % 2 ? per_call[n / 2] : (per_call[n / 2 - 1] + per_call[n / 2]) / 2;
}

template <collective C, class T, op_kind K, class Backend>
void run_sizes(Backend& b, const options& o, reporter& out, bool& corrupt_pending) {
  const int ranks = b.size(), rank = b.rank();
  const int root = has_root(C) ? o.root : -1;
  std::size_t previous = SIZE_MAX;
  for (const std::size_t requested : sizes_of(o)) {
    // Whole elements, and whole parts where the collective splits its buffer.
    std::size_t count = requested / sizeof(T);
    if (split_in_parts(C)) count -= count % std::size_t(ranks);
    if (count == previous) continue;  // rounding made it the size just run
    previous = count;
    const layout l = layout_of(C, count, ranks, rank, root);
    std::vector<T> input(o.in_place ? 0 : l.input), output(o.in_place ? l.in_place : l.output);
    auto call = [&] {
      if (o.in_place) b.template call_in_place<C, T, K>(std::span<T>(output), root);
      else b.template call<C, T, K>(std::span<const T>(input), std::span<T>(output), root);
    };
    auto upload = [&] {
      if constexpr (owns_buffers<Backend, T>) b.template upload<T>(std::span<const T>(input), std::span<const T>(output));
    };

    fill<C>(l, rank, root, o.in_place, input, output,
            o.in_place ? repeatable_value<K, T> : input_value<K, T>);
    upload();
    for (int i = 0; i < o.warmup_iterations; ++i) call();
    b.barrier();
    const double slowest = b.max_over_ranks(timed_calls(o.iterations, o.timed_batches(), call));

    long long wrong = -1;
    if (o.check) {
      fill<C>(l, rank, root, o.in_place, input, output, input_value<K, T>);
      upload();
      call();
      if constexpr (owns_buffers<Backend, T>) b.template download<T>(std::span<T>(output));
      const result_map<C> where{l, ranks, rank, root, o.in_place, Backend::reduce_scatter_in_place_result_at_own_part};
      const std::span<T> result = std::span<T>(output).subspan(where.offset(), where.length());
      const int corrupting_rank = result_on_root_only(C) ? root : ranks - 1;
      if (corrupt_pending && count > 0) {  // the same size on every rank
        if (rank == corrupting_rank) result[0] = static_cast<T>(result[0] + T(1));
        corrupt_pending = false;
      }
      long long mine = 0;
      for (std::size_t j = 0; j < result.size(); ++j)
        mine += result[j] != where.template expected<K, T>(j);
      wrong = b.sum_over_ranks(mine);
    }

    const std::size_t bytes = count * sizeof(T);
    const double algbw = slowest > 0 ? double(bytes) / slowest / 1e9 : 0;
    out.add({.bytes = bytes, .count = count, .type = name_of(element_type_of<T>()), .op = name_of(K), .root = root,
             .time_us = slowest * 1e6, .algbw_GBps = algbw, .busbw_GBps = algbw * bus_bandwidth_factor(C, ranks),
             .wrong = wrong});
  }
}

// Runs collective C over every requested type (and op, for reductions) and size, and
// prints the results on rank 0. Returns the exit status: 1 if any element was wrong.
template <collective C, class Backend>
int run_perf(Backend& b, const options& o) {
  reporter out(b.rank() == 0, o, b.describe());
  const bool opened = out.open_json();
  if (b.sum_over_ranks(opened ? 0 : 1) > 0) return 2;  // every rank stops, not only rank 0
  out.header();
  bool corrupt_pending = o.corrupt_for_test;
  for (const element_type t : o.types)
    with_type(t, [&]<class T>() {
      if constexpr (reduces(C)) {
        for (const op_kind k : o.ops) with_op(k, [&]<op_kind K>() {
          if constexpr (K != op_kind::none) run_sizes<C, T, K>(b, o, out, corrupt_pending);
        });
      } else {
        run_sizes<C, T, op_kind::none>(b, o, out, corrupt_pending);
      }
    });
  out.footer();
  return out.wrong() > 0 ? 1 : 0;
}

}  // namespace perf
