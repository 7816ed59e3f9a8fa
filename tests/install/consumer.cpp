#include <collectives/collectives.hpp>

#include <cstdio>
#include <vector>

int main() {
  int wrong = 0;
  collectives::run_ranks(3, [&](auto& comm) {
    std::vector<int> v(10, comm.rank() + 1);
    collectives::all_reduce(comm, v, collectives::sum{});
    for (int x : v) wrong += x != 6;
  });
  std::printf("consumer: %s\n", wrong ? "wrong" : "ok");
  return wrong != 0;
}
