// Groups: comm.split(color, key) and comm.split_by_host() (docs/groups.md). A group's
// communicator is a communicator<subgroup<T>> over the job's transport T, however
// deep the splits go: its ranks are renumbered, its calls counted on their own, and
// its messages kept apart from every other group's by a group number that its
// members agree on here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "algorithm/direct.hpp"
#include "communicator.hpp"
#include "detail/call_check.hpp"
#include "detail/exchange.hpp"
#include "detail/hosts.hpp"
#include "transport/subgroup.hpp"

namespace collectives {

namespace detail {

template <class Tr>
struct job_transport_of {
  using type = Tr;
};
template <class Base>
struct job_transport_of<subgroup<Base>> {
  using type = Base;
};

// What each rank tells the others when a communicator splits.
struct split_entry {
  std::int32_t color = 0;
  std::int32_t key = 0;
  std::uint32_t next_group_number = 0;
  std::uint32_t joined = 0;  // 1 in every entry sent: a slot still 0 had not come
  std::uint64_t host = 0;
};

}  // namespace detail

// The communicator of a group split from a communicator<Tr>.
template <class Tr>
using group_communicator = communicator<subgroup<typename detail::job_transport_of<Tr>::type>>;

namespace detail {

// Every rank's entry, as a call of its own that bears the user's call's name (split or
// split_by_host), so that its timeout names that call and the ranks that had not made it.
template <transport Tr>
std::vector<split_entry> exchange_split_entries(communicator<Tr>& comm, split_entry mine, const char* call) {
  if (comm.checks_calls())  // a rank that calls something else is named as such
    check_same_call(comm, call, signature_of(call, {.count = 1, .element_size = sizeof mine}, 0, 0, true));
  mine.next_group_number = comm.shared().next_group_number;
  mine.joined = 1;
  std::vector<split_entry> all(static_cast<std::size_t>(comm.size()));
  const int rank = comm.rank();
  const auto timed_out = [&](const call_context& ctx) {
    return exchange_timed_out(ctx, rank, "forming the groups",
                              ranks_missing(int(all.size()), [&](int q) { return !all[std::size_t(q)].joined; }));
  };
  service_exchange<Tr>(comm, plan_of<direct>(kind::all_gather{}, {.rank = rank, .size = comm.size(), .count = 1}), &mine,
                       all.data(), sizeof mine, call, timed_out)
      .run(comm);
  return all;
}

// This rank's group among `all` (by their colors), or none for a negative color.
template <transport Tr>
std::optional<group_communicator<Tr>> group_of(communicator<Tr>& comm, const std::vector<split_entry>& all) {
  const int color = all[std::size_t(comm.rank())].color;
  if (color < 0) return std::nullopt;
  std::vector<int> members;  // ranks of comm
  for (int q = 0; q < comm.size(); ++q)
    if (all[std::size_t(q)].color == color) members.push_back(q);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[std::size_t(a)].key < all[std::size_t(b)].key; });
  std::uint32_t number = 0;
  for (int q : members) number = std::max(number, all[std::size_t(q)].next_group_number);
  comm.shared().next_group_number = number + 1;

  const int rank = static_cast<int>(std::find(members.begin(), members.end(), comm.rank()) - members.begin());
  if constexpr (requires { comm.transport().job_rank(0); })
    for (int& q : members) q = comm.transport().job_rank(q);
  using group_transport = typename group_communicator<Tr>::transport_type;
  group_communicator<Tr> group(group_transport(comm.share(), std::move(members), rank, number), comm.timeout());
  group.check_calls(comm.checks_calls());
  group.link_figures() = comm.link_figures();  // known on every rank or on none: the same links
  return group;
}

}  // namespace detail

// comm.split(color, key): see communicator.hpp.
template <transport Tr>
std::optional<group_communicator<Tr>> split_communicator(communicator<Tr>& comm, int color, int key) {
  return detail::group_of(comm, detail::exchange_split_entries(comm, {.color = color, .key = key}, "split"));
}

// comm.split_by_host(): every rank gets the group of the ranks on its host.
template <transport Tr>
group_communicator<Tr> split_communicator_by_host(communicator<Tr>& comm) {
  auto all = detail::exchange_split_entries(comm, {.key = comm.rank(), .host = bootstrap::host_fingerprint()}, "split_by_host");
  std::vector<std::uint64_t> fingerprints;
  for (const auto& e : all) fingerprints.push_back(e.host);
  const std::vector<int> hosts = bootstrap::number_hosts(std::span<const std::uint64_t>(fingerprints));  // the color of a rank: its host's number
  for (std::size_t q = 0; q < all.size(); ++q) all[q].color = hosts[q];
  return *detail::group_of(comm, all);
}

}  // namespace collectives
