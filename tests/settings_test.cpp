// The environment variables' table and readers (collectives/settings.hpp): each kind's
// parsing, the defaults of unset and empty variables, and the exact refusals.
#include <collectives/communicator.hpp>
#include <collectives/settings.hpp>
#include <collectives/transport/device_ipc.hpp>
#include <collectives/transport/inproc.hpp>
#include <collectives/transport/selection.hpp>
#include <collectives/transport/shm.hpp>

#include <doctest/doctest.h>

#include "scoped_env.hpp"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>

namespace coll = collectives;
namespace settings = collectives::settings;
using namespace std::chrono_literals;

namespace {


// The message a reader refuses the variable's current value with ("" if it accepts it),
// without the code's own text that what() ends with.
template <class Read>
std::string refusal(Read read) {
  try {
    (void)read();
  } catch (const coll::error& e) {
    CHECK(e.code() == coll::errc::invalid_config);
    std::string message = e.what();
    const std::string code_text = ": " + e.code().message();
    CHECK(message.ends_with(code_text));
    return message.substr(0, message.size() - code_text.size());
  }
  return "";
}

}  // namespace

TEST_CASE("the table names each variable once, with a meaning and a default") {
  std::set<std::string_view> names;
  for (const auto& v : settings::table) {
    CHECK(v.name.starts_with("COLLECTIVES_"));
    CHECK(names.insert(v.name).second);
    CHECK_FALSE(v.meaning.empty());
    CHECK_FALSE(v.default_value.empty());
    if (v.kind == settings::kind::choice) CHECK_FALSE(v.words.empty());
  }
}

TEST_CASE("the table's defaults are the code's") {
  const auto& startup = settings::entry("COLLECTIVES_STARTUP_TIMEOUT");
  CHECK(settings::parse_seconds(startup, startup.default_value) == coll::shm_options{}.startup_timeout);
  const auto& timeout = settings::entry("COLLECTIVES_TIMEOUT");
  CHECK(settings::parse_seconds(timeout, timeout.default_value) == coll::default_timeout);
  const auto& slot_bytes = settings::entry("COLLECTIVES_SHM_SLOT_BYTES");
  CHECK(settings::parse_byte_size(slot_bytes, slot_bytes.default_value) == coll::shm_options{}.slot_bytes);
  const auto& slots = settings::entry("COLLECTIVES_SHM_SLOTS");
  CHECK(settings::parse_whole_number(slots, slots.default_value) == 8);
  CHECK(coll::shm_options{}.slots == 8);
  const auto& device_bytes = settings::entry("COLLECTIVES_DEVICE_SLOT_BYTES");
  CHECK(settings::parse_byte_size(device_bytes, device_bytes.default_value) == coll::device_ipc_options{}.slot_bytes);
  const auto& device_slots = settings::entry("COLLECTIVES_DEVICE_SLOTS");
  CHECK(settings::parse_whole_number(device_slots, device_slots.default_value) ==
        static_cast<long long>(coll::device_ipc_options{}.slots));
  const auto& transport = settings::entry("COLLECTIVES_TRANSPORT");
  CHECK(settings::parse_choice(transport, transport.default_value) == "auto");
  for (const auto word : {"auto", "shm", "tcp"}) CHECK(coll::parse_transport_selection(word).has_value());
}

TEST_CASE("seconds: fractions and exponents, within the table's range") {
  constexpr const char* name = "COLLECTIVES_TIMEOUT";
  {
    scoped_env unset(name, nullptr);
    CHECK_FALSE(settings::seconds(name).has_value());
    CHECK(coll::communicator<coll::shm>::timeout_from_env() == 60s);
  }
  {
    scoped_env empty(name, "");
    CHECK_FALSE(settings::seconds(name).has_value());
  }
  using case_ = std::pair<const char*, std::chrono::milliseconds>;
  for (const auto& [text, expected] : {case_{"5", 5000ms}, case_{"0.25", 250ms}, case_{"1e3", 1000s},
                                       case_{"0.001", 1ms}, case_{"1000000", 1000000s}}) {
    scoped_env set(name, text);
    CHECK(settings::seconds(name) == expected);
    CHECK(coll::communicator<coll::shm>::timeout_from_env() == expected);
  }
  const std::string accepted = " (expected a number of seconds from 0.001 to 1000000)";
  for (const char* malformed : {"abc", "5s", "1,5", " 5", "+5", "0x10"}) {
    scoped_env set(name, malformed);
    const std::string shown = std::string(malformed).find(' ') != std::string::npos
                                  ? std::string("'") + malformed + "'"
                                  : std::string(malformed);
    CHECK(refusal([&] { return settings::seconds(name); }) == std::string(name) + "=" + shown + " is not a number" + accepted);
  }
  for (const char* outside : {"0", "-1", "0.0005", "1000001", "inf", "nan", "1e400"}) {
    scoped_env set(name, outside);
    CHECK(refusal([&] { return settings::seconds(name); }) == std::string(name) + "=" + outside + " is out of range" + accepted);
  }
}

TEST_CASE("COLLECTIVES_STARTUP_TIMEOUT for shm (tcp_test checks tcp reads it alike)") {
  constexpr const char* name = "COLLECTIVES_STARTUP_TIMEOUT";
  {
    scoped_env set(name, "2.5");
    CHECK(coll::shm_options::from_env().startup_timeout == 2500ms);
  }
  scoped_env set(name, "2000000");
  CHECK(refusal([] { return coll::shm_options::from_env(); }) ==
        "COLLECTIVES_STARTUP_TIMEOUT=2000000 is out of range (expected a number of seconds from 0.001 to 1000000)");
}

TEST_CASE("whole numbers: all digits, within the range") {
  constexpr const char* name = "COLLECTIVES_SHM_SLOTS";
  {
    scoped_env empty(name, "");
    CHECK_FALSE(settings::whole_number(name).has_value());
    CHECK(coll::shm_options::from_env().slots == 8);
  }
  for (const auto& [text, expected] : {std::pair{"2", 2LL}, std::pair{"16", 16LL}, std::pair{"65536", 65536LL}}) {
    scoped_env set(name, text);
    CHECK(settings::whole_number(name) == expected);
    CHECK(coll::shm_options::from_env().slots == static_cast<std::size_t>(expected));
  }
  const std::string accepted = " (expected a whole number from 2 to 65536)";
  for (const char* malformed : {"eight", "8.0", "8k", "0x8", "+8"}) {
    scoped_env set(name, malformed);
    CHECK(refusal([&] { return settings::whole_number(name); }) ==
          std::string(name) + "=" + malformed + " is not a whole number" + accepted);
  }
  for (const char* outside : {"1", "0", "-3", "65537", "99999999999999999999"}) {
    scoped_env set(name, outside);
    CHECK(refusal([&] { return settings::whole_number(name); }) ==
          std::string(name) + "=" + outside + " is out of range" + accepted);
  }
  {
    scoped_env set("COLLECTIVES_SHM_POLL_US", "0");
    CHECK(coll::shm_options::from_env().limits.poll_time == 0us);
    CHECK(coll::shm_options::from_env().limits.oversubscribed_poll_time == 0us);
  }
}

TEST_CASE("a whole number with a bound known only when running") {
  constexpr const char* name = "COLLECTIVES_CUDA_DEVICE";
  {
    scoped_env set(name, "3");
    CHECK(settings::whole_number(name, 3) == 3);
    CHECK(refusal([&] { return settings::whole_number(name, 1); }) ==
          "COLLECTIVES_CUDA_DEVICE=3 is out of range (expected a whole number from 0 to 1)");
  }
  scoped_env unset(name, nullptr);
  CHECK_FALSE(settings::whole_number(name, 1).has_value());
}

TEST_CASE("byte sizes: bytes, or K, M and G") {
  constexpr const char* name = "COLLECTIVES_SHM_SLOT_BYTES";
  {
    scoped_env unset(name, nullptr);
    CHECK_FALSE(settings::byte_size(name).has_value());
    CHECK(coll::shm_options::from_env().slot_bytes == 64 * 1024);
  }
  for (const auto& [text, expected] : {std::pair{"64", std::size_t(64)}, std::pair{"4096", std::size_t(4096)},
                                       std::pair{"256K", std::size_t(256) << 10}, std::pair{"64M", std::size_t(64) << 20}}) {
    scoped_env set(name, text);
    CHECK(settings::byte_size(name) == expected);
    CHECK(coll::shm_options::from_env().slot_bytes == expected);
  }
  const std::string accepted = " (expected a number of bytes from 64 to 64M (K, M, G: KiB, MiB, GiB))";
  for (const char* malformed : {"big", "1.5M", "64KB", "64 K", "K", "64k", "1e5"}) {
    scoped_env set(name, malformed);
    const std::string shown = std::string(malformed).find(' ') != std::string::npos
                                  ? std::string("'") + malformed + "'"
                                  : std::string(malformed);
    CHECK(refusal([&] { return settings::byte_size(name); }) ==
          std::string(name) + "=" + shown + " is not a number of bytes" + accepted);
  }
  for (const char* outside : {"63", "0", "-64", "65M", "1G", "99999999999999999999", "9999999999999999G"}) {
    scoped_env set(name, outside);
    CHECK(refusal([&] { return settings::byte_size(name); }) ==
          std::string(name) + "=" + outside + " is out of range" + accepted);
  }
  scoped_env device("COLLECTIVES_DEVICE_SLOT_BYTES", "1G");
  CHECK(coll::device_ipc_options::from_env().slot_bytes == std::size_t(1) << 30);
}

TEST_CASE("flags: 1, on, true, yes and 0, off, false, no") {
  constexpr const char* name = "COLLECTIVES_CHECK_CALLS";
  {
    scoped_env unset(name, nullptr);
    CHECK_FALSE(settings::flag(name).has_value());
  }
  {
    scoped_env empty(name, "");
    CHECK_FALSE(settings::flag(name).has_value());
  }
  for (const char* on : {"1", "on", "true", "yes"}) {
    scoped_env set(name, on);
    CHECK(settings::flag(name) == true);
  }
  for (const char* off : {"0", "off", "false", "no"}) {
    scoped_env set(name, off);
    CHECK(settings::flag(name) == false);
  }
  for (const char* malformed : {"2", "ON", "y", "enabled"}) {
    scoped_env set(name, malformed);
    CHECK(refusal([&] { return settings::flag(name); }) ==
          std::string(name) + "=" + malformed + " is not a flag (expected 1, on, true or yes; 0, off, false or no)");
  }
}

TEST_CASE("text: anything but empty") {
  constexpr const char* name = "COLLECTIVES_STORE_DIR";
  {
    scoped_env empty(name, "");
    CHECK_FALSE(settings::text(name).has_value());
  }
  scoped_env set(name, "/tmp/a dir");
  CHECK(settings::text(name) == "/tmp/a dir");
}

TEST_CASE("choices: one of the table's words, spelt exactly") {
  constexpr const char* name = "COLLECTIVES_TRANSPORT";
  {
    scoped_env empty(name, "");
    CHECK_FALSE(settings::choice(name).has_value());
    CHECK(coll::selected_transport() == coll::transport_selection::automatic);
  }
  {
    scoped_env set(name, "tcp");
    CHECK(settings::choice(name) == "tcp");
    CHECK(coll::selected_transport() == coll::transport_selection::tcp);
  }
  for (const char* malformed : {"SHM", "udp", "shm ", "tcp,shm"}) {
    scoped_env set(name, malformed);
    const std::string shown = std::string(malformed).find(' ') != std::string::npos
                                  ? std::string("'") + malformed + "'"
                                  : std::string(malformed);
    const std::string expected =
        std::string(name) + "=" + shown + " is not a choice (expected auto, shm, tcp or rdma)";
    CHECK(refusal([&] { return settings::choice(name); }) == expected);
    CHECK(refusal([] { return coll::selected_transport(); }) == expected);
  }
  scoped_env debug("COLLECTIVES_DEBUG", "verbose");
  CHECK(refusal([] { return settings::choice("COLLECTIVES_DEBUG"); }) ==
        "COLLECTIVES_DEBUG=verbose is not a choice (expected WARN, INFO, DEBUG, TRACE, warn, info, debug, trace, 0, "
        "1, 2 or 3)");
}

TEST_CASE("what each kind accepts, as docs/settings.md says it") {
  CHECK(settings::accepted(settings::entry("COLLECTIVES_STARTUP_TIMEOUT")) ==
        "a number of seconds from 0.001 to 1000000");
  CHECK(settings::accepted(settings::entry("COLLECTIVES_SHM_POLL_US")) == "a whole number from 0 to 10000000");
  CHECK(settings::accepted(settings::entry("COLLECTIVES_DEVICE_SLOT_BYTES")) ==
        "a number of bytes from 256 to 1G (K, M, G: KiB, MiB, GiB)");
  CHECK(settings::accepted(settings::entry("COLLECTIVES_JOB_TOKEN")) == "any text");
}

TEST_CASE("COLLECTIVES_CHECK_CALLS sets a communicator's default") {
  coll::inproc_group group(1);
  using comm = coll::communicator<coll::inproc>;
  {
    scoped_env set("COLLECTIVES_CHECK_CALLS", "yes");
    CHECK(comm(group.transport(0)).checks_calls());
  }
  {
    scoped_env set("COLLECTIVES_CHECK_CALLS", "");
    CHECK_FALSE(comm(group.transport(0)).checks_calls());
  }
  scoped_env set("COLLECTIVES_CHECK_CALLS", "sometimes");
  CHECK(refusal([&] { return comm(group.transport(0)); }) ==
        "COLLECTIVES_CHECK_CALLS=sometimes is not a flag (expected 1, on, true or yes; 0, off, false or no)");
}
