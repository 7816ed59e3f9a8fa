// FNV-1a: the same bytes give the same 64-bit hash in every process of a program, for
// short records that travel between ranks (a call's signature, a host's identity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace collectives::bootstrap {

inline std::uint64_t fingerprint(std::span<const std::byte> bytes, std::uint64_t h = 14695981039346656037ull) {
  for (std::byte b : bytes) h = (h ^ std::uint64_t(b)) * 1099511628211ull;
  return h;
}
inline std::uint64_t fingerprint(std::string_view s) { return fingerprint(std::as_bytes(std::span{s.data(), s.size()})); }

}  // namespace collectives::bootstrap
