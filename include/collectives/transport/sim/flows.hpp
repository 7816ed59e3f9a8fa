// Shared bandwidth for a simulated cluster (cluster_model::shares_bandwidth): each
// message's bytes are a flow through the links it crosses (its sender's and receiver's
// ports, a host's NIC, a leaf switch's uplinks), and the flows on a link share it
// max-min fairly. Rates are found again, by progressive filling, once flows have
// started or ended (settle(), before the clock moves on), among the flows that share
// a link with them, directly or through others (their component): a ring's flows touch
// few others, an all-to-all's all. The flows' ends are kept in order (a heap indexed by
// flow), so a flow whose rate changes moves there instead of leaving a stale event.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../runtime/prefetch.hpp"
#include "events.hpp"

namespace collectives::sim_detail {

// A slot of `pool` for a new entry: the last one let go (listed in `unused`), or a new
// one at the end. Slots never move between entries, so an event may name one.
template <class T>
std::uint32_t take_slot(std::vector<T>& pool, std::vector<std::uint32_t>& unused) {
  if (unused.empty()) {
    pool.emplace_back();
    return static_cast<std::uint32_t>(pool.size() - 1);
  }
  const std::uint32_t slot = unused.back();
  unused.pop_back();
  return slot;
}

// The flows on one link, in the order they started. A link seldom carries more than a
// few (a ring's port one or two): they are kept in the link itself, and in an
// allocation of their own only beyond that, so that a look at a link's flows reads
// one line, not two.
class flow_list {
 public:
  const std::uint32_t* begin() const noexcept { return size_ <= kept ? kept_ : spilled_.data(); }
  const std::uint32_t* end() const noexcept { return begin() + size_; }
  std::size_t size() const noexcept { return size_; }

  void push_back(std::uint32_t id) {
    if (size_ < kept) {
      kept_[size_++] = id;
      return;
    }
    if (size_ == kept) spilled_.assign(kept_, kept_ + kept);
    spilled_.push_back(id);
    ++size_;
  }
  // Takes out `id`, which is in the list; the others keep their order.
  void erase(std::uint32_t id) {
    if (size_ <= kept) {
      std::uint32_t* const at = std::find(kept_, kept_ + size_, id);
      std::copy(at + 1, kept_ + size_, at);
      --size_;
      return;
    }
    spilled_.erase(std::find(spilled_.begin(), spilled_.end(), id));
    if (--size_ == kept) {
      std::copy(spilled_.begin(), spilled_.end(), kept_);
      spilled_.clear();
    }
  }

 private:
  static constexpr std::uint32_t kept = 4;
  std::uint32_t size_ = 0;
  std::uint32_t kept_[kept]{};
  std::vector<std::uint32_t> spilled_;
};

class flow_network {
 public:
  static constexpr std::uint32_t none = UINT32_MAX;
  static constexpr std::size_t longest_path = 6;

  flow_network() = default;
  flow_network(const flow_network&) = delete;  // its heap refers to its flows
  flow_network& operator=(const flow_network&) = delete;

  // A link that takes `seconds_per_byte` (0: no limit); returns its number.
  std::uint32_t add_link(double seconds_per_byte) {
    links_.push_back({seconds_per_byte > 0 ? 1e-12 / seconds_per_byte : 1e30, {}});
    return static_cast<std::uint32_t>(links_.size() - 1);
  }

  // A flow of `bytes` (more than 0) through `path` from `now`; `owner` is the caller's.
  std::uint32_t start(picoseconds now, double bytes, const std::uint32_t* path, std::size_t hops, std::uint64_t owner) {
    const std::uint32_t id = take_slot(flows_, unused_);
    flow& f = flows_[id];
    f.remaining = bytes;
    f.rate = 0;
    f.since = now;
    f.hops = static_cast<std::uint8_t>(hops);
    f.owner = owner;
    f.active = true;
    for (std::size_t h = 0; h < hops; ++h) {
      f.path[h] = path[h];
      links_[path[h]].flows.push_back(id);
      dirty_.push_back(path[h]);
    }
    return id;
  }

  // The flow ended (its bytes are through): the others it shared links with speed up.
  void finish(std::uint32_t id) {
    flow& f = flows_[id];
    f.active = false;
    ends_.remove(id);
    for (std::size_t h = 0; h < f.hops; ++h) {
      links_[f.path[h]].flows.erase(id);
      dirty_.push_back(f.path[h]);
    }
    unused_.push_back(id);
  }

  // Finds the rates of the flows on links where flows started or ended since the last
  // call, and of their components.
  void settle(picoseconds now) {
    if (dirty_.empty()) return;
    share_among(now, dirty_.data(), dirty_.size());
    dirty_.clear();
  }

  // Takes the flow that ends first out of the order of ends, ahead of its finish().
  void take_first() { ends_.remove(ends_.top()); }

  // Ask for the lines of flow `id`, then (once that is in) those of its links.
  void prefetch(std::uint32_t id) const noexcept { detail::prefetch(&flows_[id]); }
  void prefetch_links(std::uint32_t id) const noexcept {
    const flow& f = flows_[id];
    for (std::size_t h = 0; h < f.hops; ++h) detail::prefetch(&links_[f.path[h]]);
  }

  // The flow that ends first (after settle()), and when; none when no flow is left.
  std::uint32_t first_to_end() const noexcept { return ends_.empty() ? none : ends_.top(); }
  picoseconds end_of(std::uint32_t id) const noexcept { return flows_[id].ends; }
  std::uint64_t owner(std::uint32_t id) const noexcept { return flows_[id].owner; }

 private:
  struct alignas(64) link {  // one line
    double capacity;  // bytes per picosecond
    flow_list flows;
  };
  struct flow {
    double remaining = 0;  // bytes, as of `since`
    double rate = 0;       // bytes per picosecond
    picoseconds since = 0;
    picoseconds ends = 0;  // at the rate found last
    std::uint32_t path[longest_path]{};
    std::uint8_t hops = 0;
    bool active = false;
    std::uint64_t owner = 0;
  };

  // Max-min fair rates for the components of the links in `path`, one component at a
  // time (the flows started at one instant across a ring are thousands of components of
  // a flow or two: filling them as one would cost their number squared).
  void share_among(picoseconds now, const std::uint32_t* path, std::size_t hops) {
    ++mark_;
    for (std::size_t h = 0; h < hops; ++h) {
      if (h + 8 < hops) detail::prefetch(&links_[path[h + 8]]);  // thousands of links, in no order
      component_links_.clear();
      component_flows_.clear();
      visit_link(path[h]);
      if (component_links_.empty()) continue;  // in a component filled already
      for (std::size_t i = 0; i < component_links_.size(); ++i)
        for (std::uint32_t id : links_[component_links_[i]].flows)
          if (flow_marks_[id] != mark_) {
            flow_marks_[id] = mark_;
            component_flows_.push_back(id);
            for (std::size_t k = 0; k < flows_[id].hops; ++k) visit_link(flows_[id].path[k]);
          }
      fill(now);
    }
  }

  // Progressive filling of the component in component_links_ and component_flows_: the
  // link whose fair share is smallest fixes its flows at that share, which leaves the
  // rest of their links' capacity to the others; and again.
  void fill(picoseconds now) {
    old_rates_.clear();
    for (std::uint32_t id : component_flows_) {  // bytes moved at the old rates
      flow& f = flows_[id];
      f.remaining = std::max(0.0, f.remaining - f.rate * double(now - f.since));
      f.since = now;
      old_rates_.push_back(f.rate);
      f.rate = -1;  // not fixed yet
    }
    for (std::uint32_t l : component_links_) {
      left_[l] = links_[l].capacity;
      unfixed_[l] = static_cast<std::uint32_t>(links_[l].flows.size());
    }
    for (std::size_t fixed = 0; fixed < component_flows_.size();) {
      std::uint32_t narrowest = none;
      double share = 0;
      for (std::uint32_t l : component_links_)
        if (unfixed_[l] > 0 && (narrowest == none || left_[l] / unfixed_[l] < share)) {
          narrowest = l;
          share = left_[l] / unfixed_[l];
        }
      for (std::uint32_t id : links_[narrowest].flows) {
        flow& f = flows_[id];
        if (f.rate >= 0) continue;
        f.rate = std::max(share, 1e-30);
        ++fixed;
        for (std::size_t h = 0; h < f.hops; ++h) {
          left_[f.path[h]] = std::max(0.0, left_[f.path[h]] - f.rate);
          --unfixed_[f.path[h]];
        }
      }
    }
    // A flow whose rate stayed ends when it was going to.
    for (std::size_t i = 0; i < component_flows_.size(); ++i) {
      flow& f = flows_[component_flows_[i]];
      if (f.rate == old_rates_[i]) continue;
      f.ends = now + static_cast<picoseconds>(std::ceil(f.remaining / f.rate));
      ends_.place(component_flows_[i]);
    }
  }

  void visit_link(std::uint32_t l) {
    if (link_marks_.size() < links_.size()) {
      link_marks_.resize(links_.size(), 0);
      left_.resize(links_.size());
      unfixed_.resize(links_.size());
    }
    if (flow_marks_.size() < flows_.size()) flow_marks_.resize(flows_.size(), 0);
    if (link_marks_[l] == mark_) return;
    link_marks_[l] = mark_;
    component_links_.push_back(l);
  }

  // The flows in flight by their ends: a binary heap of (end, flow), with each flow's
  // place in it. The end is kept beside the flow's number, so that sifting compares
  // without a look into the flows.
  class by_end {
   public:
    explicit by_end(const std::vector<flow>& flows) : flows_(flows) {}
    bool empty() const noexcept { return heap_.empty(); }
    std::uint32_t top() const noexcept { return heap_.front().id; }
    // Puts the flow where its end belongs, whether or not it was in already.
    void place(std::uint32_t id) {
      if (id >= place_.size()) place_.resize(id + 1, none);
      if (place_[id] == none) {
        place_[id] = static_cast<std::uint32_t>(heap_.size());
        heap_.push_back({flows_[id].ends, id});
      } else {
        heap_[place_[id]].ends = flows_[id].ends;
      }
      up(down(place_[id]));
    }
    void remove(std::uint32_t id) {
      if (id >= place_.size() || place_[id] == none) return;
      const std::uint32_t i = place_[id];
      place_[id] = none;
      const entry last = heap_.back();
      heap_.pop_back();
      if (last.id == id) return;
      heap_[i] = last;
      place_[last.id] = i;
      up(down(i));
    }

   private:
    struct entry {
      picoseconds ends;
      std::uint32_t id;
    };
    static bool before(const entry& a, const entry& b) noexcept {  // by end, then by number: one order always
      return a.ends != b.ends ? a.ends < b.ends : a.id < b.id;
    }
    void swap_places(std::uint32_t i, std::uint32_t j) {
      std::swap(heap_[i], heap_[j]);
      place_[heap_[i].id] = i;
      place_[heap_[j].id] = j;
    }
    std::uint32_t down(std::uint32_t i) {
      for (;;) {
        std::uint32_t least = i;
        for (std::uint32_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c)
          if (before(heap_[c], heap_[least])) least = c;
        if (least == i) return i;
        swap_places(i, least);
        i = least;
      }
    }
    void up(std::uint32_t i) {
      while (i > 0 && before(heap_[i], heap_[(i - 1) / 2])) {
        swap_places(i, (i - 1) / 2);
        i = (i - 1) / 2;
      }
    }
    const std::vector<flow>& flows_;
    std::vector<entry> heap_;
    std::vector<std::uint32_t> place_;
  };

  std::vector<link> links_;
  std::vector<flow> flows_;
  by_end ends_{flows_};
  std::vector<std::uint32_t> unused_;
  std::vector<std::uint32_t> dirty_;  // links whose flows changed since the last settle()
  // Scratch of share_among, kept between calls.
  std::vector<std::uint32_t> component_links_, component_flows_;
  std::vector<std::uint64_t> link_marks_, flow_marks_;
  std::vector<double> left_, old_rates_;
  std::vector<std::uint32_t> unfixed_;
  std::uint64_t mark_ = 0;
};

}  // namespace collectives::sim_detail
