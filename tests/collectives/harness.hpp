// Shared machinery of the collective tests: the values of values.hpp, and the ranks
// to run them on.
#pragma once

#include <doctest/doctest.h>

#include "values.hpp"

// How the ranks run: grid/ranks.hpp picks threads, threads with faults or the
// processes of a job when the test starts (the device tests have their own ranks.hpp;
// the include path picks which), so the same tests check every transport. It defines
// `comm`, `rank_counts` and `on_ranks(p, fn)`, which runs fn(comm) -> std::string
// (empty when right) on P ranks and checks every rank's answer.
#include "ranks.hpp"
