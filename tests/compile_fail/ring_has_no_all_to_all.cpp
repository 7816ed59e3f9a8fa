// expect: does not implement all_to_all
#include <collectives/collectives.hpp>

void f(collectives::communicator<collectives::inproc>& comm, std::vector<int>& in, std::vector<int>& out) {
  collectives::all_to_all<collectives::ring>(comm, in, out);
}
