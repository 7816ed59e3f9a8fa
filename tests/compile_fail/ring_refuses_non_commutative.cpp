// expect: applies the op out of rank order
// ring combines in ring order, so an op not declared commutative is refused.
#include <collectives/collectives.hpp>

struct concat_digits {  // associative, not commutative: a*10+b
  int operator()(int a, int b) const { return a * 10 + b; }
};

void f(collectives::communicator<collectives::inproc>& comm, std::vector<int>& v) {
  collectives::all_reduce<collectives::ring>(comm, v, concat_digits{});
}
