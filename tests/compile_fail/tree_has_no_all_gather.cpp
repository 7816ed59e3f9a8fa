// expect: does not implement all_gather
#include <collectives/collectives.hpp>

void f(collectives::communicator<collectives::inproc>& comm, std::vector<int>& in, std::vector<int>& out) {
  collectives::all_gather<collectives::double_binary_tree>(comm, in, out);
}
