// expect: must be callable as op\(const T&, const T&\)
// The built-in ops are constrained, so a type without + is named, not backtraced.
#include <collectives/collectives.hpp>

struct point {
  int x, y;
};

void f(collectives::communicator<collectives::inproc>& comm, std::vector<point>& v) {
  collectives::all_reduce(comm, v, collectives::sum{});
}
