// A program built against collectives::compiled (separate compilation): its
// communicator comes from another translation unit, its calls are made here, and
// the start-up and the transport's engine come from the library. Run as processes
// under collectives-run, over shm and over tcp; each rank checks every result against
// a serial computation and exits non-zero on any difference.
#include <collectives/collectives.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "make_communicator.hpp"

namespace coll = collectives;

namespace {

// Not commutative: the result depends on the order of the ranks.
struct keep_first_nonzero {
  static constexpr bool commutative = false;
  std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a != 0 ? a : b; }
};

int failures = 0;

void expect(bool ok, const char* what, int rank) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: wrong result: %s\n", rank, what);
  ++failures;
}

}  // namespace

int main() {
  auto comm = make_communicator();
  const int rank = comm.rank(), size = comm.size();

  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t(size) + 1, std::size_t{100003}}) {
    std::vector<std::int64_t> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = std::int64_t(i % 1000) * (rank + 1);
    coll::all_reduce(comm, data, coll::sum{});
    bool ok = true;
    for (std::size_t i = 0; i < count; ++i) ok &= data[i] == std::int64_t(i % 1000) * size * (size + 1) / 2;
    expect(ok, "all_reduce sum", rank);

    std::vector<std::int64_t> mine(count, rank == 0 ? 0 : rank * 7);
    coll::all_reduce(comm, mine, keep_first_nonzero{});  // in rank order
    expect(std::all_of(mine.begin(), mine.end(), [&](std::int64_t v) { return v == (size > 1 ? 7 : 0); }),
           "all_reduce with a user-defined op", rank);
  }

  std::vector<double> everyone(std::size_t(size) * 3);
  const std::vector<double> own{double(rank), double(rank) + 0.5, double(rank) * 2};
  coll::all_gather(comm, std::span<const double>(own), std::span<double>(everyone));
  bool gathered = true;
  for (int r = 0; r < size; ++r)
    gathered &= everyone[std::size_t(r) * 3] == r && everyone[std::size_t(r) * 3 + 1] == r + 0.5 &&
                everyone[std::size_t(r) * 3 + 2] == r * 2;
  expect(gathered, "all_gather", rank);

  if (rank == 0) std::printf("%s over %s: %s\n", "separate compilation", std::string(comm.transport().name()).c_str(),
                             failures == 0 ? "every result right" : "WRONG RESULTS");
  return failures == 0 ? 0 : 1;
}
