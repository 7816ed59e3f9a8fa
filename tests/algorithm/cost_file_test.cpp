// The cost file COLLECTIVES_TUNE=1 saves and COLLECTIVES_TUNE_FILE reads: what is
// saved reads back, and every defect of a file is a clear error naming its line.
#include <sstream>
#include <string>

#include <collectives/detail/cost_file.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;

namespace {

coll::link_classes read(const std::string& text, std::string& transport) {
  std::istringstream in(text);
  return coll::detail::parse_cost_file(in, "costs.txt", transport);
}

std::string error_of(const std::string& text) {
  std::string transport;
  try {
    read(text, transport);
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    return e.what();
  }
  return "no error";
}

const coll::link_classes example{{.latency_s = 2.5e-6, .per_message_s = 3e-7, .seconds_per_byte = 1.25e-10,
                                  .reduce_seconds_per_byte = 2e-10, .memory_seconds_per_byte = 2.5e-10,
                                  .copy_seconds_per_byte = 5e-11, .middle_seconds_per_byte = 1.5e-10},
                                 {.latency_s = 4e-5, .per_message_s = 5e-6, .seconds_per_byte = 8e-9,
                                  .reduce_seconds_per_byte = 2e-10, .memory_seconds_per_byte = 9e-9,
                                  .copy_seconds_per_byte = 5e-11, .middle_seconds_per_byte = 8.5e-9}};

}  // namespace

TEST_CASE("cost file: the figures saved read back, with the transport they were measured over") {
  const std::string text = coll::detail::cost_file_text(example, "tcp", "measured for a test");
  std::string transport;
  const coll::link_classes back = read(text, transport);
  CHECK(transport == "tcp");
  CHECK(coll::same_figures(back.on_host, example.on_host));
  CHECK(coll::same_figures(back.across_hosts, example.across_hosts));
  CHECK(text.find("# collectives link costs: measured for a test") == 0);
}

TEST_CASE("cost file: one saved before the memory, copy and 4 MiB figures were measured reads, without them") {
  std::string text = coll::detail::cost_file_text(example, "shm", "saved earlier");
  for (const char* line : {"on_host.memory_seconds_per_byte 2.5e-10\n", "across_hosts.memory_seconds_per_byte 9e-09\n",
                           "on_host.copy_seconds_per_byte 5e-11\n", "across_hosts.copy_seconds_per_byte 5e-11\n",
                           "on_host.middle_seconds_per_byte 1.5e-10\n", "across_hosts.middle_seconds_per_byte 8.5e-09\n"}) {
    const auto at = text.find(line);
    REQUIRE(at != std::string::npos);
    text.erase(at, std::string(line).size());
  }
  std::string transport;
  const coll::link_classes back = read(text, transport);
  CHECK(back.on_host.seconds_per_byte == example.on_host.seconds_per_byte);
  CHECK(back.on_host.memory_seconds_per_byte == 0);
  CHECK(back.across_hosts.memory_seconds_per_byte == 0);
  CHECK(back.on_host.copy_seconds_per_byte == 0);
  CHECK(back.across_hosts.copy_seconds_per_byte == 0);
  CHECK(back.on_host.middle_seconds_per_byte == 0);
  CHECK(back.across_hosts.middle_seconds_per_byte == 0);
}

TEST_CASE("cost file: each defect is an invalid_config error that names the line and the figure") {
  const std::string good = coll::detail::cost_file_text(example, "shm", "x");
  const auto with_line_changed = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  CHECK(error_of(with_line_changed("on_host.latency_s 2.5e-06", "on_host.latency_s -1")).find(
            "costs.txt, line 3: on_host.latency_s must be a number >= 0, not -1") != std::string::npos);
  CHECK(error_of(with_line_changed("on_host.latency_s 2.5e-06", "on_host.latency_s fast")).find("not fast") !=
        std::string::npos);
  CHECK(error_of(with_line_changed("on_host.latency_s 2.5e-06", "on_host.latency_s inf")).find("not inf") !=
        std::string::npos);
  CHECK(error_of(with_line_changed("on_host.latency_s", "on_host.latency")).find("unknown figure on_host.latency") !=
        std::string::npos);
  CHECK(error_of(with_line_changed("across_hosts.latency_s", "between_hosts.latency_s")).find("unknown figure") !=
        std::string::npos);
  CHECK(error_of(with_line_changed("on_host.latency_s 2.5e-06", "on_host.latency_s 1 2")).find(
            "expected a name and one value") != std::string::npos);
  CHECK(error_of(with_line_changed("on_host.per_message_s", "on_host.latency_s")).find("on_host.latency_s is given twice") !=
        std::string::npos);
  CHECK(error_of(good.substr(0, good.rfind("across_hosts.reduce"))).find("has 8 of its 9 lines") != std::string::npos);
  CHECK(error_of("").find("has 0 of its 9 lines") != std::string::npos);
  CHECK(error_of("# only a comment\n\n").find("has 0 of its 9 lines") != std::string::npos);
}
