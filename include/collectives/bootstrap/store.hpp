// The key-value store the ranks of a job meet at before they have any connection to
// each other: rank 0 publishes where it listens, the others look it up. A virtual
// interface, because which store a job uses (TCP or a shared directory) is decided at
// run time, and the calls are few and far from any hot path.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../concepts/transport.hpp"
#include "../error.hpp"

namespace collectives::bootstrap {

// The same limits for every store, so a program that works on one works on another.
// They also let a server refuse a frame before allocating anything for it.
inline constexpr std::size_t max_key_size = 4096;
inline constexpr std::size_t max_value_size = std::size_t{64} << 20;

class key_value_store {
 public:
  virtual ~key_value_store() = default;

  // Stores `value` (any bytes, empty included) under `key`, replacing what was there.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value under `key`, waiting until some rank sets it; errc::timeout naming the
  // key when `until` passes first.
  virtual std::string get(const std::string& key, deadline until) = 0;
  // Atomically adds `delta` to the integer under `key` (a missing key counts as 0) and
  // returns the new value. The value is kept as decimal text, so get() reads "42";
  // adding to a key that holds anything else is errc::protocol_error.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Returns once every key is set; errc::timeout naming a missing key when `until` passes.
  virtual void wait(const std::vector<std::string>& keys, deadline until) = 0;
  // Whether every key is set right now, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
};

// Refuses a key or value no store accepts, before anything is sent or written.
inline void check_store_sizes(const std::string& key, std::size_t value_size) {
  if (key.size() > max_key_size)
    throw error(errc::count_overflow, "a store key of " + std::to_string(key.size()) +
                                          " bytes is longer than the limit of " + std::to_string(max_key_size) +
                                          " bytes");
  if (value_size > max_value_size)
    throw error(errc::count_overflow, "a store value of " + std::to_string(value_size) + " bytes (key '" + key +
                                          "') is larger than the limit of " + std::to_string(max_value_size) +
                                          " bytes");
}

namespace detail {

// The integer a counter key holds, or nothing when it holds anything else.
inline std::optional<std::int64_t> parse_counter(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// A counter wraps around on overflow, as the hardware does, instead of being undefined.
inline std::int64_t wrapping_add(std::int64_t a, std::int64_t b) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

}  // namespace detail

// Returns once all `size` ranks have called barrier with the same name. The same name
// may be used again and again: arrivals are counted in one counter, and arrival n
// belongs to round (n - 1) / size, which no rank can leave before all have arrived, so
// the rounds never mix.
inline void barrier(key_value_store& store, const std::string& name, int rank, int size, deadline until) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_config, "barrier '" + name + "': rank " + std::to_string(rank) + " of " +
                                          std::to_string(size) + " is not a rank of the group");
  const std::string counter = "barrier/" + name + "/arrived";
  const std::int64_t arrival = store.add(counter, 1);
  const std::int64_t round = (arrival - 1) / size;
  const std::string released = "barrier/" + name + "/released/" + std::to_string(round);
  if (arrival % size == 0) store.set(released, "");
  try {
    store.wait({released}, until);
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
    std::int64_t arrived = -1;
    try {
      arrived = store.add(counter, 0) - round * size;
    } catch (const error&) {  // the count is only a hint for the message below
    }
    throw error(errc::timeout, "barrier '" + name + "' timed out at rank " + std::to_string(rank) + ": " +
                                   (arrived < 0 ? std::string("unknown") : std::to_string(arrived)) + " of " +
                                   std::to_string(size) + " ranks had arrived");
  }
}

}  // namespace collectives::bootstrap
