// expect: element type must be trivially copyable
#include <string>

#include <collectives/collectives.hpp>

void f(collectives::communicator<collectives::inproc>& comm, std::vector<std::string>& v) {
  collectives::broadcast(comm, v, 0);
}
