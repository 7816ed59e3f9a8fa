// expect: ^$
// The same calls, done right, compile: proves the failures above are the checks'.
#include <collectives/collectives.hpp>

struct concat_digits {
  int operator()(int a, int b) const { return a * 10 + b; }
};

void f(collectives::communicator<collectives::inproc>& comm, std::vector<int>& v, std::vector<int>& out) {
  collectives::all_reduce<collectives::direct>(comm, v, concat_digits{});
  collectives::all_to_all<collectives::direct>(comm, v, out);
  collectives::all_gather<collectives::ring>(comm, v, out);
  collectives::all_reduce(comm, v, collectives::sum{});
}
