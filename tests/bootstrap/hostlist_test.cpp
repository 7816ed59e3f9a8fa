// Slurm's host list syntax, as SLURM_JOB_NODELIST writes it, and the messages for what
// is not in it.
#include <doctest/doctest.h>

#include <ostream>  // lets doctest print an error_code
#include <string>
#include <vector>

#include <collectives/bootstrap/hostlist.hpp>

using collectives::bootstrap::expand_hostlist;
using hosts = std::vector<std::string>;

TEST_CASE("host lists expand as scontrol show hostnames lists them") {
  CHECK(expand_hostlist("L", "gpu5") == hosts{"gpu5"});
  CHECK(expand_hostlist("L", "node[01-03,07],gpu5") == hosts{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(expand_hostlist("L", "n[8-11]") == hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("L", "n[098-101]") == hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("L", "rack[1-2]-n[1-2]") == hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand_hostlist("L", "a-b.example.com,c[3]") == hosts{"a-b.example.com", "c3"});
  CHECK(expand_hostlist("L", "node[1-100000]", 1) == hosts{"node1"});  // only as many as asked for
  CHECK(expand_hostlist("L", "x[5-6],y", 2) == hosts{"x5", "x6"});
}

TEST_CASE("what is not a host list is named with the variable and the reason") {
  const std::pair<const char*, const char*> cases[] = {
      {"node[01-03", "unbalanced brackets"},
      {"node01]", "unbalanced brackets"},
      {"n[[1]]", "unbalanced brackets"},
      {"a,,b", "an empty name"},
      {"", "an empty name"},
      {"node[3-1]", "'node[3-1]' has a bracket that is not a range of numbers"},
      {"node[a-b]", "has a bracket that is not a range of numbers"},
      {"node[]", "has a bracket that is not a range of numbers"},
      {"node[1-]", "has a bracket that is not a range of numbers"},
  };
  for (const auto& one : cases) {
    const char* list = one.first;  // (not a structured binding: clang 14 lets no macro's lambda capture one)
    const char* why = one.second;
    CAPTURE(list);
    try {
      expand_hostlist("SLURM_JOB_NODELIST", list);
      FAIL("accepted");
    } catch (const collectives::error& e) {
      CHECK(e.code() == collectives::errc::invalid_config);
      const std::string message = e.what();
      CHECK_MESSAGE(message.starts_with(std::string("SLURM_JOB_NODELIST=") + list + " is not a Slurm host list"), message);
      CHECK_MESSAGE(message.find(why) != std::string::npos, message);
    }
  }
}
