// A group of some of a job's ranks, as a transport: the communicator that split.hpp
// makes for a group sends through its job's transport (no new connections or
// segments), renumbering the ranks and keeping its messages apart from every other
// group's by a group number in the tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include "../runtime/shared_transport.hpp"
#include "../bootstrap/host_identity.hpp"
#include "../concepts/transport.hpp"
#include "../error.hpp"

namespace collectives {

template <transport Base>
class subgroup {
 public:
  using base_type = Base;
  using request = typename Base::request;
  static constexpr transport_traits traits = traits_of<Base>();
  static constexpr link_costs costs = costs_of<Base>();

  // Group numbers live in the tags' call numbers, above the bits that count calls
  // and below the bit that device_ipc's notices keep (concepts/vocabulary.hpp).
  static constexpr int call_bits = 47;
  static constexpr std::uint32_t max_group_number = (std::uint32_t(1) << (63 - call_bits)) - 1;

  // `members` holds the job's rank of each rank of the group, in the group's order;
  // this process is the one at `rank`.
  subgroup(std::shared_ptr<shared_transport<Base>> job, std::vector<int> members, int rank, std::uint32_t number)
      : job_(std::move(job)), members_(std::move(members)), rank_(rank), number_(number) {
    if (number_ == 0 || number_ > max_group_number)
      throw error(errc::invalid_group, "subgroup: group number " + std::to_string(number_) + " is not in 1.." +
                                              std::to_string(max_group_number) + " (too many groups made)");
  }

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }

  // The job's rank of the group's rank `r`, and every one of them.
  int job_rank(int r) const { return members_[static_cast<std::size_t>(r)]; }
  std::span<const int> members() const noexcept { return members_; }
  std::uint32_t number() const noexcept { return number_; }

  request post_send(int peer, message_tag tag, std::span<const std::byte> data) {
    return base().post_send(job_rank(peer), own(tag), data);
  }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into) {
    return base().post_recv(job_rank(peer), own(tag), into);
  }
  template <class Space>
    requires requires(Base& b, std::span<const std::byte> d) { b.post_send(0, message_tag{}, d, Space{}); }
  request post_send(int peer, message_tag tag, std::span<const std::byte> data, Space space) {
    return base().post_send(job_rank(peer), own(tag), data, space);
  }
  template <class Space>
    requires requires(Base& b, std::span<std::byte> d) { b.post_recv(0, message_tag{}, d, Space{}); }
  request post_recv(int peer, message_tag tag, std::span<std::byte> into, Space space) {
    return base().post_recv(job_rank(peer), own(tag), into, space);
  }
  request post_recv_reduce(int peer, message_tag tag, std::size_t bytes, std::size_t granule, chunk_sink sink)
    requires fused_recv_reduce_transport<Base>
  {
    return base().post_recv_reduce(job_rank(peer), own(tag), bytes, granule, sink);
  }
  std::optional<request> post_local_step(local_step step, std::size_t bytes)
    requires charges_local_steps<Base>
  {
    return base().post_local_step(step, bytes);
  }
  template <class Space>
  auto memory_operations(Space space)
    requires requires(Base& b) { b.memory_operations(space); }
  {
    return base().memory_operations(space);
  }
  link_costs current_costs() const { return costs_of(job_->transport); }
  deadline now() const { return now_of(job_->transport); }  // the job's clock
  // The members' hosts, where the job's transport knows them, numbered again in the
  // order of the members' first ranks.
  std::vector<int> hosts() const {
    const std::vector<int> job = hosts_known_to(job_->transport);
    if (job.empty()) return {};
    std::vector<int> job_host_of_member;
    for (int m : members_) job_host_of_member.push_back(job[std::size_t(m)]);
    return bootstrap::number_hosts(std::span<const int>(job_host_of_member));
  }

  bool test(request& r) { return base().test(r); }
  bool wait_for_activity(deadline until) { return base().wait_for_activity(until); }
  void cancel(request& r) noexcept { base().cancel(r); }
  // The job's transport is shared: this aborts every group of the job.
  void abort() { base().abort(); }
  void note_failure(std::string_view what) noexcept
    requires requires(Base& b, std::string_view w) { b.note_failure(w); }
  {
    base().note_failure(what);
  }

  Base& base() noexcept { return job_->transport; }
  shared_transport<Base>& shared() const noexcept { return *job_; }
  const std::shared_ptr<shared_transport<Base>>& shared_pointer() const noexcept { return job_; }

 private:
  message_tag own(message_tag tag) const {
    if (tag.call >> call_bits)
      throw error(errc::count_overflow, "subgroup: call number " + std::to_string(tag.call) + " does not fit its " +
                                              std::to_string(call_bits) + " bits");
    return {tag.call | (std::uint64_t(number_) << call_bits), tag.step};
  }

  std::shared_ptr<shared_transport<Base>> job_;
  std::vector<int> members_;
  int rank_;
  std::uint32_t number_;
};

}  // namespace collectives
