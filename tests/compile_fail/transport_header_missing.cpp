// expect: declared but not defined: include its header: <collectives/transport/shm.hpp> for shm
#include <collectives/collectives.hpp>

// shm named without its header: the error names the header to include.
int main() {
  auto comm = collectives::communicator<collectives::shm>::from_env();
  return comm.rank();
}
