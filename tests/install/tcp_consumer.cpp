#include <collectives/collectives.hpp>
#include <collectives/transport/tcp.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto comm = collectives::communicator<collectives::tcp>::from_env();
  std::vector<int> v(10, comm.rank() + 1);
  collectives::all_reduce(comm, v, collectives::sum{});
  const int want = comm.size() * (comm.size() + 1) / 2;
  int wrong = 0;
  for (int x : v) wrong += x != want;
  std::printf("tcp_consumer rank %d: %s\n", comm.rank(), wrong ? "wrong" : "ok");
  return wrong != 0;
}
