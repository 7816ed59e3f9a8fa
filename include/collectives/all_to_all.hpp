// all_to_all / all_to_allv: part j of rank i's buffer ends as part i on rank j
// (a transpose across ranks: MoE token routing, sequence-parallel attention).
#pragma once

#include <memory>
#include <ranges>
#include <span>
#include <vector>

#include "algorithm/automatic.hpp"
#include "detail/call.hpp"

namespace collectives {

// Out-of-place: `input` and `output` have P*N elements; part j of the input goes to
// rank j, and part i of the output comes from rank i.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void all_to_all(communicator<Tr>& comm, const In& input, Out&& output) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::all_to_all>,
                "collectives: this algorithm does not implement all_to_all");
  const char* call = "all_to_all";
  const std::size_t n = detail::slot_of(call, std::ranges::size(input), comm.size());
  detail::check_size(call, "output", std::ranges::size(output), std::ranges::size(input));
  detail::check_bytes<T>(call, std::ranges::size(input));
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::all_to_all{}, {.count = n},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

// In-place: parts are sent from, and received into, the same buffer (through a copy
// of the input, since every part is read and overwritten at once).
template <algorithm Algorithm = automatic, transport Tr, writable_buffer Data>
void all_to_all(communicator<Tr>& comm, Data&& data) {
  const std::span all{data};
  detail::slot_of("all_to_all", all.size(), comm.size());  // reject a bad size before copying
  const auto input = std::make_shared<const std::vector<element_of<Data>>>(all.begin(), all.end());
  if (comm.in_flight().starting()) comm.in_flight().keep_for_next(input);  // a non-blocking call reads it later
  all_to_all<Algorithm>(comm, *input, all);
}

// Out-of-place, uneven: this rank sends send_counts[j] elements to rank j, taken back
// to back from `input`, and receives recv_counts[i] elements from rank i, stored back
// to back in `output`. send_counts[j] on rank i must equal recv_counts[i] on rank j.
template <algorithm Algorithm = automatic, transport Tr, buffer In, writable_buffer Out>
  requires std::same_as<element_of<In>, element_of<Out>>
void all_to_allv(communicator<Tr>& comm, const In& input, std::span<const std::size_t> send_counts, Out&& output,
                 std::span<const std::size_t> recv_counts) {
  using T = element_of<Out>;
  static_assert(implements<Algorithm, kind::all_to_allv>,
                "collectives: this algorithm does not implement all_to_allv");
  const char* call = "all_to_allv";
  detail::check_counts(call, send_counts, comm.size());
  detail::check_counts(call, recv_counts, comm.size());
  const auto r = static_cast<std::size_t>(comm.rank());
  detail::check_size(call, "recv_counts[rank] (the part kept)", recv_counts[r], send_counts[r]);
  detail::check_size(call, "input", std::ranges::size(input), detail::checked_total(call, send_counts));
  detail::check_size(call, "output", std::ranges::size(output), detail::checked_total(call, recv_counts));
  detail::check_bytes<T>(call, std::ranges::size(input));
  detail::check_bytes<T>(call, std::ranges::size(output));
  no_reduce op;
  detail::run<Algorithm, memory_space_of<Out>>(comm, call, kind::all_to_allv{},
                                               {.counts = send_counts, .recv_counts = recv_counts},
                                               std::ranges::data(input), std::ranges::data(output), op);
}

}  // namespace collectives
