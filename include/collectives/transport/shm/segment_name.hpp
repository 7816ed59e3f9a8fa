// Names of the shared-memory segments of a job: /dev/shm/collectives-<T>-<J>-<G>,
// where T fingerprints the job token, J the launch (the launcher's job identity) and
// G counts the communicators this process created. Two jobs never share a name
// unless they share both token and launch; a launcher that knows the token can find
// (and remove) every segment its job might have left after a crash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace collectives::shm_detail {

// FNV-1a: a name, not a secret; the segment's 0600 mode is what keeps others out.
inline std::uint64_t fingerprint(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

inline std::string hex(std::uint64_t value, int digits) {
  char text[17] = {};
  std::snprintf(text, sizeof text, "%0*llx", digits, static_cast<unsigned long long>(value));
  return std::string(text, static_cast<std::size_t>(digits));
}

// What every segment of the job with this token starts with, as /dev/shm lists it
// (without the leading slash that shm_open takes).
inline std::string segment_prefix(std::string_view token_secret) {
  return "collectives-" + hex(fingerprint(token_secret), 16) + "-";
}

}  // namespace collectives::shm_detail
