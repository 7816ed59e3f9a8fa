// 01: ring all-reduce, written by hand from send and recv.
//
// The ring is the algorithm behind most large all-reduces. Each rank talks only to
// its two neighbours, yet sends just 2(P-1)/P of the buffer in all, whatever the rank
// count P: no all-reduce can send less. The buffer is cut into P chunks, and the
// work is two phases of P-1 steps each:
//
//   reduce-scatter  each step, a rank passes one chunk to its right and adds the
//                   chunk arriving from its left into its own copy; after P-1 steps
//                   rank r holds chunk r summed over all ranks.
//   all-gather      the finished chunks travel once more round the ring, each one
//                   overwriting stale copies, until every rank has every chunk.
//
// With P = 3, chunks a b c, and x_r meaning rank r's part of chunk x:
//
//                 rank 0          rank 1          rank 2
//   step 0        b += b2         c += c0         a += a1
//   step 1        a += a1+a2      b += b0+b2      c += c0+c1
//   owns, summed  a               b               c
//
// collectives::ring follows the same schedule (and pipelines it); this program
// checks the hand-written ring against it and against a serial sum.
//
// usage: 01_ring_all_reduce [ranks = 4] [elements = 1003]                ranks as threads
//        collectives-run -n 4 01_ring_all_reduce [elements = 1003]       ranks as processes
// (see ranks.hpp: the same code runs either way)

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

// Chunk c of n elements cut into p nearly equal parts: the first n % p chunks get
// one element more, so any n works, even n < p (some chunks are then empty).
// Chunk numbers wrap round the ring: chunk -1 is chunk p-1.
struct extent {
  std::size_t offset, count;
};
extent chunk_of(std::size_t n, int p, int c) {
  const std::size_t parts = std::size_t(p), k = std::size_t((c % p + p) % p);
  const std::size_t base = n / parts, extra = n % parts;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

// Sums `data` over all ranks, in place. Returns how many elements this rank sent.
// Comm is communicator<inproc> when the ranks are threads, communicator<tcp> when
// they are processes: send and recv are the same calls for both.
template <class Comm>
std::size_t ring_all_reduce(Comm& comm, std::span<float> data) {
  const int p = comm.size(), r = comm.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  constexpr std::uint32_t reduce_scatter_tag = 0, all_gather_tag = 1;
  std::size_t sent = 0;
  auto chunk = [&](int c) {
    const auto [offset, count] = chunk_of(data.size(), p, c);
    return data.subspan(offset, count);
  };

  // One step of the ring: `outgoing` goes right while `incoming` arrives from the left.
  //
  // Why not simply send, then recv, on every rank? send blocks until the peer has
  // taken the message, and a rank takes a message only by calling recv. If every rank
  // sends first, each waits for its right-hand neighbour, which waits for its own: the
  // waits close into a circle, nobody reaches recv, and the communicator's deadline
  // ends it all with errc::timeout. (MPI programs hit the same wall with MPI_Ssend, or
  // with MPI_Send once messages are too large to buffer.) The textbook cure breaks the
  // circle: even ranks send first, odd ranks receive first. Every odd rank is ready at
  // once for its left neighbour's message, so the sends into odd ranks complete, and
  // then the roles swap. With an odd P, ranks P-1 and 0 are both even: rank P-1 waits
  // until rank 0 has finished its own send and turned to recv, a chain of waits, not
  // a circle. With P = 1 there are no steps at all (and no one to talk to: sending to
  // oneself is an error).
  auto exchange = [&](std::span<const float> outgoing, std::span<float> incoming, std::uint32_t tag) {
    if (r % 2 == 0) {
      coll::send(comm, outgoing, right, tag);
      coll::recv(comm, incoming, left, tag);
    } else {
      coll::recv(comm, incoming, left, tag);
      coll::send(comm, outgoing, right, tag);
    }
    sent += outgoing.size();
  };

  // Reduce-scatter: at step s, send chunk r-s-1 (summed over s+1 ranks so far) and
  // add the arriving chunk r-s-2 into ours. It lands beside the buffer, not in it,
  // because it is to be added, not copied; chunk 0 is the largest, so room for it fits all.
  std::vector<float> arrived(chunk(0).size());
  for (int step = 0; step < p - 1; ++step) {
    const std::span<float> mine = chunk(r - step - 2);
    const std::span<float> landing{arrived.data(), mine.size()};
    exchange(chunk(r - step - 1), landing, reduce_scatter_tag);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] += landing[i];
  }

  // All-gather: at step s, pass on chunk r-s (finished) and take chunk r-s-1 straight
  // into place. The chunk sent and the chunk received are never the same, and send
  // returns only once the buffer has been read, so nothing is overwritten too early.
  for (int step = 0; step < p - 1; ++step) exchange(chunk(r - step), chunk(r - step - 1), all_gather_tag);
  return sent;
}

// Rank r's input: small integers stored as floats. Their sums are exact in any order,
// so every way of adding them (by hand, ring, serial) must agree to the last bit.
float input_value(int rank, std::size_t i) { return float(int((i * 7 + std::size_t(rank) * 13) % 101) - 50); }

// The answer every rank must reach, computed the plain way.
std::vector<float> serial_sum(int ranks, std::size_t n) {
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < n; ++i) sum[i] += input_value(r, i);
  return sum;
}

// Throws on the first element that differs; run_example reports it, and main returns 1.
void expect_equal(const std::vector<float>& got, const std::vector<float>& want, int rank, const char* what) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      throw std::runtime_error("rank " + std::to_string(rank) + ": " + what + "[" + std::to_string(i) + "] is " +
                               std::to_string(got[i]) + ", the serial sum is " + std::to_string(want[i]));
}

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  const long long elements = command.number(0, 1003);
  if (!command.well_formed(1) || elements < 0) return command.usage("[elements >= 0]");
  const std::size_t n = std::size_t(elements);

  // What follows runs on every rank: on a thread of this process or, under a launcher,
  // in a process of its own. `comm` is a communicator<inproc> or a communicator<tcp>,
  // and every call reads the same for both (ranks.hpp).
  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size();  // the launcher's -n, or the threads asked for
    const std::vector<float> serial = serial_sum(ranks, n);

    std::vector<float> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = input_value(comm.rank(), i);
    std::vector<float> by_library = data;

    const std::size_t sent = ring_all_reduce(comm, data);
    coll::all_reduce<coll::ring>(comm, by_library, coll::sum{});

    expect_equal(data, serial, comm.rank(), "hand-written ring");
    expect_equal(by_library, serial, comm.rank(), "all_reduce<ring>");
    if (!examples::prints_summary(comm)) return;

    std::cout << "ring all-reduce of " << n << " floats over " << ranks << (ranks == 1 ? " rank, " : " ranks, ")
              << 2 * (ranks - 1) << " steps\n"
              << "  chunks:";
    for (int c = 0; c < ranks; ++c) std::cout << ' ' << chunk_of(n, ranks, c).count;
    std::cout << " elements\n  rank 0 sent " << sent << " elements, " << (n ? double(sent) / double(n) : 0.0)
              << " times the buffer (2(P-1)/P = " << 2.0 * (ranks - 1) / ranks << ")\n  result:";
    for (std::size_t i = 0; i < n && i < 6; ++i) std::cout << ' ' << serial[i];
    std::cout << (n > 6 ? " ...\n" : "\n")
              << "  hand-written ring == collectives::all_reduce<ring> == serial sum, on every rank\n";
  });
}
