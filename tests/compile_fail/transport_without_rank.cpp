// expect: a transport must provide `int rank\(\) const`
#include <collectives/collectives.hpp>

struct half_a_transport {
  struct request {};
  int size() const { return 1; }
};

collectives::communicator<half_a_transport>* p = nullptr;
void f() { (void)p->size(); }
