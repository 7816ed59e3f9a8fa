// The library's environment variables: one table of them (name, kind, what is accepted,
// default, meaning), in the order docs/settings.md lists them, and one reader per kind,
// so that every variable is read by the same rules and refused with the same words.
// Unset or empty means the default. Anything else that does not parse, or lies outside
// what the table accepts, is errc::invalid_config naming the variable, its value and
// what is accepted: a half-understood setting makes a job misbehave instead of fail.
//
//   if (auto t = settings::seconds("COLLECTIVES_STARTUP_TIMEOUT")) o.startup_timeout = *t;
//
// A reader takes the name as a literal, checked against the table when compiled: a
// misspelt name, or a reader of another kind than the table's, does not compile.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "config.hpp"
#include "error.hpp"

namespace collectives::settings {

enum class kind {
  seconds,       // a decimal number of seconds ("60", "0.5", "1e3") within a range
  whole_number,  // an integer within a range
  byte_size,     // a whole number of bytes, or with K, M or G (KiB, MiB, GiB), within a range
  flag,          // 1, on, true, yes / 0, off, false, no
  text,          // any text
  choice,        // one of a few words, spelt exactly
};

struct variable {
  std::string_view name;
  settings::kind kind;
  double lowest = 0, highest = 0;  // seconds, whole_number, byte_size: the accepted range
  std::string_view words;          // choice: the accepted words, separated by spaces
  std::string_view default_value;  // as docs/settings.md shows it
  std::string_view meaning;        // one line
};

inline constexpr double kib = 1024, mib = kib * 1024, gib = mib * 1024;

// Every variable the library and collectives-run read. docs/settings.md has one row for
// each, in this order (a test compares them).
inline constexpr variable table[] = {
    {"COLLECTIVES_TRANSPORT", kind::choice, 0, 0, "auto shm tcp rdma", "auto",
     "the transport of communicator<automatic_transport>: auto is shm when every rank is on this host, else rdma over "
     "a hardware fabric provider where the program has collectives::rdma and libfabric offers one, else tcp"},
    {"COLLECTIVES_TIMEOUT", kind::seconds, 0.001, 1e6, "", "60",
     "the deadline of every blocking call of a communicator made by from_env()"},
    {"COLLECTIVES_STARTUP_TIMEOUT", kind::seconds, 0.001, 1e6, "", "60",
     "how long shm and tcp wait for every rank of the job to join"},
    {"COLLECTIVES_JOB_TOKEN", kind::text, 0, 0, "", "a public token, with a warning",
     "the job's shared secret, which admits a rank to the store, connections and segments; collectives-run sets a fresh one"},
    {"COLLECTIVES_STORE_DIR", kind::text, 0, 0, "", "unset: the TCP store at MASTER_ADDR:MASTER_PORT",
     "a directory every rank shares, for a file store in place of the TCP store"},
    {"COLLECTIVES_STORE_LISTEN", kind::choice, 0, 0, "master_addr any", "master_addr",
     "where rank 0's TCP store listens: master_addr is MASTER_ADDR itself when it is an IP address of this host (a "
     "loopback one: this host alone), every interface otherwise; any: every interface"},
    {"COLLECTIVES_SOCKET_IFNAME", kind::text, 0, 0, "", "the interface that routes to MASTER_ADDR",
     "the interface name or local address tcp listens on"},
    {"COLLECTIVES_FABRIC_PROVIDER", kind::text, 0, 0, "", "FI_PROVIDER, else the first hardware provider, else tcp",
     "the libfabric provider rdma uses (fi_info -l lists them): verbs, efa, cxi, psm3, tcp, shm, ..."},
    {"COLLECTIVES_RDMA_EAGER_BYTES", kind::byte_size, 64, 1 * mib, "", "8K",
     "rdma sends messages up to this size whole; larger ones are announced and read by the receiver"},
    {"COLLECTIVES_SHM_SLOT_BYTES", kind::byte_size, 64, 64 * mib, "", "64K",
     "the fragment size of shm's FIFOs, its pipelining chunk"},
    {"COLLECTIVES_SHM_SLOTS", kind::whole_number, 2, 65536, "", "8",
     "fragments per FIFO of shm; the segment takes about size * (size - 1) * slots * slot bytes"},
    {"COLLECTIVES_SHM_POLL_US", kind::whole_number, 0, 1e7, "", "50, or 2000 when ranks outnumber cores",
     "microseconds a wait of shm polls before it sleeps"},
    {"COLLECTIVES_SHM_ONE_COPY_BYTES", kind::byte_size, 0, gib, "", "0",
     "shm's receivers read messages from this size on straight from the sender's memory (process_vm_readv), where "
     "the kernel allows it; 0: every message goes through the FIFOs"},
    {"COLLECTIVES_DEVICE_SLOT_BYTES", kind::byte_size, 256, gib, "", "1M",
     "the slot size of a device inbox of cuda_ipc, its pipelining chunk"},
    {"COLLECTIVES_DEVICE_SLOTS", kind::whole_number, 1, 1024, "", "4",
     "slots per sender in each device inbox of cuda_ipc"},
    {"COLLECTIVES_CUDA_DEVICE", kind::whole_number, 0, 1 << 30, "", "the local rank modulo the device count",
     "the CUDA device of every rank of this process's host (below the device count)"},
    {"COLLECTIVES_CHECK_CALLS", kind::flag, 0, 0, "", "off",
     "checks before each collective that every rank made the same call"},
    {"COLLECTIVES_PROGRESS_THREAD", kind::flag, 0, 0, "", "off",
     "every communicator starts a thread that advances its non-blocking calls while the rank computes"},
    {"COLLECTIVES_TUNE", kind::flag, 0, 0, "", "off",
     "each communicator's first choosing call measures the link costs automatic picks by (a ring shift on each host and "
     "across hosts) and saves them to COLLECTIVES_TUNE_FILE when set"},
    {"COLLECTIVES_TUNE_FILE", kind::text, 0, 0, "", "unset: the transport's own figures",
     "a file of link costs that COLLECTIVES_TUNE=1 saved, which automatic picks by; rank 0 reads it"},
    {"COLLECTIVES_DEBUG", kind::choice, 0, 0, "WARN INFO DEBUG TRACE warn info debug trace 0 1 2 3", "WARN",
     "INFO (or info, 1) also logs what each communicator set up and which algorithm each call chose; DEBUG "
     "(2) every call as it ends; TRACE (3) every step of every call"},
    {"COLLECTIVES_TRACE", kind::text, 0, 0, "", "unset: no trace",
     "a file to write a timeline of every call and its steps to (Chrome trace-event JSON), one per process"},
    {"COLLECTIVES_RUN_KEEP_SHM", kind::flag, 0, 0, "", "off",
     "collectives-run keeps the shared-memory segments a job left in /dev/shm"},
};

// The table's entry for `name`; evaluated when compiled, where a missing name fails.
consteval const variable& entry(std::string_view name) {
  for (const variable& v : table)
    if (v.name == name) return v;
  throw "not a variable in the table of collectives/settings.hpp";
}

// A variable's name, checked when compiled to be in the table as a `Kind`.
template <kind Kind>
struct name_of {
  const variable* v;
  consteval name_of(const char* name) : v(&entry(name)) {  // implicit, so that readers take literals
    if (v->kind != Kind) throw "the variable is of another kind in the table of collectives/settings.hpp";
  }
};

// ---- What is accepted, and refusals -------------------------------------------------

namespace detail {

inline std::string number_text(double x) {
  std::array<char, 64> text{};
  return std::string(text.data(), std::to_chars(text.data(), text.data() + text.size(), x, std::chars_format::fixed).ptr);
}

inline std::string bytes_text(double bytes) {
  for (const auto& [unit, suffix] : {std::pair{gib, "G"}, std::pair{mib, "M"}, std::pair{kib, "K"}})
    if (bytes >= unit && static_cast<long long>(bytes) % static_cast<long long>(unit) == 0)
      return number_text(bytes / unit) + suffix;
  return number_text(bytes);
}

// "a, b or c" from the words "a b c".
inline std::string word_list(std::string_view words) {
  std::string list;
  while (!words.empty()) {
    const auto space = words.find(' ');
    const auto word = words.substr(0, space);
    words = space == std::string_view::npos ? std::string_view{} : words.substr(space + 1);
    if (!list.empty()) list += words.empty() ? " or " : ", ";
    list += word;
  }
  return list;
}

}  // namespace detail

// NAME=value, with the value quoted when blanks or odd bytes would hide in it.
COLLECTIVES_DECL std::string assignment(std::string_view name, std::string_view value);

// What `v` accepts, as the refusals and docs/settings.md say it.
COLLECTIVES_DECL std::string accepted(const variable& v);

// errc::invalid_config: "NAME=value <problem> (expected <accepted>)".
[[noreturn]] inline void refuse(std::string_view name, std::string_view value, std::string_view problem,
                                std::string_view expected) {
  throw error(errc::invalid_config,
              assignment(name, value) + " " + std::string(problem) + " (expected " + std::string(expected) + ")");
}

// ---- Parsing a value, set or not ------------------------------------------------------

// The whole of `text` as an integer in [lowest, highest]; the launch variables (RANK,
// MASTER_PORT, ...) are read by this too, with their own words for what is expected.
COLLECTIVES_DECL long long parse_whole_number(std::string_view name, std::string_view text, long long lowest,
                                              long long highest, std::string_view expected);

COLLECTIVES_DECL long long parse_whole_number(const variable& v, std::string_view text);
COLLECTIVES_DECL std::chrono::milliseconds parse_seconds(const variable& v, std::string_view text);
COLLECTIVES_DECL std::size_t parse_byte_size(const variable& v, std::string_view text);
COLLECTIVES_DECL bool parse_flag(const variable& v, std::string_view text);

// The table's word that `text` spells: a view that outlives the environment's copy.
COLLECTIVES_DECL std::string_view parse_choice(const variable& v, std::string_view text);

// ---- Reading the environment ----------------------------------------------------------

// The variable's value; nothing when unset or empty (`export NAME=` is how shells clear).
COLLECTIVES_DECL std::optional<std::string> value_of(std::string_view name);

// Each reader returns nothing when the variable is unset or empty: the caller's default,
// which is the one the table shows.
COLLECTIVES_DECL std::optional<std::chrono::milliseconds> seconds(name_of<kind::seconds> n);
COLLECTIVES_DECL std::optional<long long> whole_number(name_of<kind::whole_number> n);

// With an upper bound known only when running (a device count), below the table's.
COLLECTIVES_DECL std::optional<long long> whole_number(name_of<kind::whole_number> n, long long highest);
COLLECTIVES_DECL std::optional<std::size_t> byte_size(name_of<kind::byte_size> n);
COLLECTIVES_DECL std::optional<bool> flag(name_of<kind::flag> n);

inline std::optional<std::string> text(name_of<kind::text> n) { return value_of(n.v->name); }

COLLECTIVES_DECL std::optional<std::string_view> choice(name_of<kind::choice> n);

}  // namespace collectives::settings

#if !defined(COLLECTIVES_SEPARATE_COMPILATION)
#include "settings.ipp"
#endif
