// 03: distributed arg-max: the largest value of a vector sharded over the ranks,
// and where it is.
//
// Each rank finds its local best as a (value, global index) pair; one all_reduce with
// a user-written op then picks the best of the bests. The op works on a user struct:
// any trivially copyable type can travel, as bytes.
//
// At the end rank 0 collects every rank's local best with a gather, to show them:
// with processes, nothing is shared but what is sent.
//
// usage: 03_arg_max [ranks = 4]                 ranks as threads
//        collectives-run -n 4 03_arg_max        ranks as processes
// (see ranks.hpp: the same code runs either way)

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

struct candidate {
  float value;
  long index;  // in the whole vector, not in the shard, so it means the same on every rank
};

// The better of two candidates: the larger value and, on a tie, the lower index (as
// std::max_element picks serially).
//
// The tie rule is what makes the op commutative. Without it ("keep a unless b is
// larger") a tie would go to whichever operand comes first, and the answer would
// depend on the order in which the algorithm combines the ranks. With it,
// op(a, b) == op(b, a) for every pair (indices are unique, and the data has no NaN),
// so the op may truthfully declare itself commutative, and every algorithm, ring
// included, may combine in any order.
struct arg_max {
  static constexpr bool commutative = true;
  candidate operator()(const candidate& a, const candidate& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

// Loses to every real candidate, so a rank with an empty shard can still take part.
constexpr candidate nobody{-std::numeric_limits<float>::infinity(), std::numeric_limits<long>::max()};

// Shards of different sizes; the values repeat, so the maximum occurs several times.
std::size_t shard_size(int rank) { return 60 + 30 * std::size_t(rank); }
std::size_t shard_offset(int rank) {
  std::size_t offset = 0;
  for (int q = 0; q < rank; ++q) offset += shard_size(q);
  return offset;
}
float value_at(std::size_t g) { return float(g * 37 % 101); }

void expect_same(const candidate& got, const candidate& want, int rank, const char* what) {
  if (got.value != want.value || got.index != want.index)
    throw std::runtime_error("rank " + std::to_string(rank) + ": " + what + " found " + std::to_string(got.value) +
                             " at " + std::to_string(got.index) + ", serially it is " + std::to_string(want.value) +
                             " at " + std::to_string(want.index));
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  if (!command.well_formed(0)) return command.usage("");

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank();

    // The serial answer: the first maximum of the whole vector.
    std::vector<float> whole(shard_offset(ranks));
    for (std::size_t g = 0; g < whole.size(); ++g) whole[g] = value_at(g);
    const auto first_max = std::max_element(whole.begin(), whole.end());
    const candidate serial{*first_max, long(first_max - whole.begin())};

    const std::size_t offset = shard_offset(r);
    std::vector<float> shard(shard_size(r));
    for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = value_at(offset + i);

    // The local scan uses the same op, so local and global ties are settled alike.
    candidate best = nobody;
    for (std::size_t i = 0; i < shard.size(); ++i) best = arg_max{}(best, {shard[i], long(offset + i)});

    // One value per rank in, the best of them out, on every rank.
    const candidate global = coll::all_reduce(comm, best, arg_max{});
    expect_same(global, serial, r, "all_reduce");

    // Forcing the ring, which combines out of rank order: it accepts the op only
    // because the op declares itself commutative, and the answer is the same.
    const candidate by_ring = coll::all_reduce<coll::ring>(comm, best, arg_max{});
    expect_same(by_ring, serial, r, "all_reduce<ring>");

    // For the summary, every rank's local best in rank order, on rank 0 (the root);
    // the other ranks receive nothing, so their output is empty.
    std::vector<candidate> local_bests(r == 0 ? std::size_t(ranks) : 0);
    coll::gather(comm, std::span<const candidate>(&best, 1), local_bests, 0);
    if (!examples::prints_summary(comm)) return;

    std::cout << "arg-max of " << whole.size() << " values over " << ranks << (ranks == 1 ? " rank" : " ranks")
              << "\n  local bests:";
    for (const candidate& c : local_bests) std::cout << "  " << c.value << " at " << c.index;
    std::cout << "\n  global best: " << global.value << " at index " << global.index << '\n';
    std::vector<long> ties;
    for (std::size_t g = std::size_t(serial.index) + 1; g < whole.size(); ++g)
      if (whole[g] == serial.value) ties.push_back(long(g));
    if (ties.empty()) {
      std::cout << "  (no ties this time)\n";
    } else {
      std::cout << "  it also occurs at";
      for (long t : ties) std::cout << ' ' << t;
      std::cout << ": the lowest index wins the tie\n";
    }
    std::cout << "  all_reduce and all_reduce<ring> agree with the serial scan on every rank\n";
  });
}
