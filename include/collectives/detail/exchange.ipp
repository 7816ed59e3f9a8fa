// An exchange's timeout words (exchange.hpp): inline in header-only use, compiled once
// into collectives::compiled with COLLECTIVES_SEPARATE_COMPILATION.
#pragma once

#include <string>

#include "exchange.hpp"

namespace collectives::detail {

error exchange_timed_out(const call_context& ctx, int rank, std::string_view doing, const std::string& ranks) {
  return error(errc::timeout, std::string(ctx.name) + ": timed out after " + std::to_string(ctx.timeout_ms) + " ms on rank " +
                                  std::to_string(rank) + " " + std::string(doing) + ": " +
                                  (ranks.empty() ? "every rank's part came too late"
                                                 : "rank(s) " + ranks + " had not made the call within the timeout"));
}

}  // namespace collectives::detail
