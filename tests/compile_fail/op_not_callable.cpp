// expect: must be callable as op\(const T&, const T&\)
#include <collectives/collectives.hpp>

struct takes_strings {
  std::string operator()(const std::string& a, const std::string&) const { return a; }
};

void f(collectives::communicator<collectives::inproc>& comm, std::vector<int>& v) {
  collectives::all_reduce(comm, v, takes_strings{});
}
