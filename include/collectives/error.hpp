// One error category and one exception type for everything the library reports.
#pragma once

#include <string>
#include <system_error>

namespace collectives {

enum class errc {
  invalid_root = 1,      // root is not a rank of the communicator
  invalid_peer,          // send/recv peer is not a rank, or is the caller itself
  buffer_size_mismatch,  // a buffer's size does not match what the collective needs
  count_overflow,        // element or byte counts overflow size_t
  timeout,               // the deadline passed before the operation finished
  aborted,               // the communicator was aborted, by this rank or another
  message_truncated,     // a peer sent more bytes than the receiver posted
  peer_lost,             // a peer died or its connection broke
  invalid_group,         // a group must have at least one rank
  call_mismatch,         // ranks made different calls (found when call checking is on)
  unauthorized,          // the other end of a connection could not prove the job's token
  protocol_error,        // a malformed frame, or one that does not fit what was posted
  invalid_config,        // the environment or arguments do not describe a usable job
  device_error,          // a CUDA call failed (no device, out of device memory, a kernel fault)
  not_finite,            // an input holds infinity or NaN where the op needs finite values (reproducible_sum)
};

class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "collectives"; }
  std::string message(int code) const override {
    switch (static_cast<errc>(code)) {
      case errc::invalid_root: return "invalid root";
      case errc::invalid_peer: return "invalid peer";
      case errc::buffer_size_mismatch: return "buffer size mismatch";
      case errc::count_overflow: return "count overflow";
      case errc::timeout: return "timed out";
      case errc::aborted: return "aborted";
      case errc::message_truncated: return "message truncated";
      case errc::peer_lost: return "peer lost";
      case errc::invalid_group: return "invalid group";
      case errc::call_mismatch: return "call mismatch";
      case errc::unauthorized: return "unauthorized";
      case errc::protocol_error: return "protocol error";
      case errc::invalid_config: return "invalid configuration";
      case errc::device_error: return "device error";
      case errc::not_finite: return "not finite";
    }
    return "unknown collectives error";
  }
  // Lets portable code test e.g. `e.code() == std::errc::timed_out`.
  std::error_condition default_error_condition(int code) const noexcept override {
    switch (static_cast<errc>(code)) {
      case errc::invalid_root:
      case errc::invalid_peer:
      case errc::buffer_size_mismatch:
      case errc::invalid_group:
      case errc::call_mismatch:
      case errc::invalid_config:
      case errc::not_finite: return std::errc::invalid_argument;
      case errc::unauthorized: return std::errc::permission_denied;
      case errc::protocol_error: return std::errc::protocol_error;
      case errc::count_overflow: return std::errc::value_too_large;
      case errc::timeout: return std::errc::timed_out;
      case errc::aborted: return std::errc::operation_canceled;
      case errc::message_truncated: return std::errc::message_size;
      case errc::peer_lost: return std::errc::connection_reset;
      case errc::device_error: return std::errc::io_error;
    }
    return {code, *this};
  }
};

inline const std::error_category& error_category() noexcept {
  static const error_category_impl category;
  return category;
}

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

// The exception every operation throws: code() tells what, what() tells the details
// (which call, which rank, which sizes).
class error : public std::system_error {
 public:
  error(errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
};

namespace detail {

// The ranks of 0 .. size-1 that `missing(rank)` picks, as the timeout messages list the
// ranks that had not come after "rank(s) ": "1, 2" (empty when it picks none).
template <class Missing>
std::string ranks_missing(int size, Missing missing) {
  std::string ranks;
  for (int q = 0; q < size; ++q)
    if (missing(q)) ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
  return ranks;
}

}  // namespace detail

}  // namespace collectives

template <>
struct std::is_error_code_enum<collectives::errc> : std::true_type {};
