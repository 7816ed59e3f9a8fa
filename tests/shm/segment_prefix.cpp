// Prints the prefix of the shared-memory segments of the job whose token is in
// COLLECTIVES_JOB_TOKEN, as /dev/shm lists them: no_leftovers.sh and the launcher
// tests look for exactly the names the library makes.
#include <cstdio>
#include <cstdlib>

#include <collectives/transport/shm/segment_name.hpp>

int main() {
  const char* token = std::getenv("COLLECTIVES_JOB_TOKEN");
  if (token == nullptr || *token == '\0') {
    std::fputs("shm_segment_prefix: COLLECTIVES_JOB_TOKEN is not set\n", stderr);
    return 2;
  }
  std::puts(collectives::shm_detail::segment_prefix(token).c_str());
}
