// The collective tests' ranks as threads of this process, over the inproc transport.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include <collectives/collectives.hpp>
#include <doctest/doctest.h>

#include "shared_counter.hpp"

namespace testing {

using comm = collectives::communicator<collectives::inproc>;

inline const std::vector<int> rank_counts{1, 2, 3, 4, 5, 8};

template <class Fn>
void on_ranks(int p, Fn fn) {
  std::vector<std::string> problems(static_cast<std::size_t>(p));
  collectives::run_ranks(p, [&](comm& c) { problems[std::size_t(c.rank())] = fn(c); }, std::chrono::seconds(30));
  for (int r = 0; r < p; ++r) {
    INFO("rank ", r);
    CHECK_MESSAGE(problems[std::size_t(r)].empty(), problems[std::size_t(r)]);
  }
}

}  // namespace testing
