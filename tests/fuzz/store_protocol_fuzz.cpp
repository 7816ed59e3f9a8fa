// The TCP store's server side, fed a stream of requests as a client's socket would
// deliver them: nothing the stream says sizes anything beyond the protocol's limits,
// every request accepted re-encodes to the bytes it came from, each answer is what
// the store's rules say for the data before it, and each reply header goes through
// the client's parser unchanged. Any 8 bytes the client's parser accepts as a reply
// header re-encode to themselves.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include <collectives/bootstrap/tcp_store_server.hpp>

#include "fuzz_check.hpp"

namespace boot = collectives::bootstrap;
namespace store = collectives::bootstrap::detail;

namespace {

void check_request(std::span<const unsigned char> stream, const store::taken_request& t) {
  const auto& [h, key, value] = t.request;
  fuzz_check(key.size() == h.key_size && value.size() == h.value_size, "a request's body is not the size it says");
  fuzz_check(key.size() <= boot::max_key_size && value.size() <= boot::max_value_size,
             "a request was accepted beyond the store's limits");
  fuzz_check(t.used == store::request_header_size + key.size() + value.size() && t.used <= stream.size(),
             "a request took other bytes than its own");
  fuzz_check(h.op == store::store_op::set || value.size() == (h.op == store::store_op::add ? 8u : 0u),
             "an operation was accepted with a value it does not take");
  fuzz_check(h.op == store::store_op::get || h.op == store::store_op::wait || h.timeout_ms == 0,
             "a timeout was accepted on an operation that takes none");
  const auto header = store::encode_request(h);
  fuzz_check(std::memcmp(header.data(), stream.data(), header.size()) == 0 &&
                 std::memcmp(key.data(), stream.data() + header.size(), key.size()) == 0 &&
                 std::memcmp(value.data(), stream.data() + header.size() + key.size(), value.size()) == 0,
             "an accepted request does not re-encode to its bytes");
}

// The answer against the store's rules, given what the key held before.
void check_answer(const boot::detail::request_header& h, const std::string& value,
                  const std::optional<std::string>& before, const store::store_data& data, const std::string& key,
                  const store::store_answer& a) {
  using store::store_op, store::store_status;
  const auto now = data.find(key);
  switch (h.op) {
    case store_op::set:
      fuzz_check(a.status == store_status::ok && a.value.empty() && a.changed && now != data.end() &&
                     now->second == value,
                 "a set did not store its value");
      break;
    case store_op::get:
    case store_op::wait:
      if (before)
        fuzz_check(a.status == store_status::ok && !a.parks &&
                       a.value == (h.op == store_op::get ? *before : std::string()),
                   "a get or wait of a present key did not answer with it");
      else
        fuzz_check(h.timeout_ms == 0 ? a.status == store_status::timed_out && !a.parks : a.parks,
                   "a get or wait of an absent key did not park or time out as its timeout says");
      fuzz_check(!a.changed, "a get or wait changed the store");
      break;
    case store_op::check:
      fuzz_check(a.status == (before ? store_status::ok : store_status::absent) && a.value.empty() && !a.changed,
                 "a check answered wrongly");
      break;
    case store_op::add: {
      const auto old = before ? store::parse_counter(*before) : std::optional<std::int64_t>(0);
      if (!old) {
        fuzz_check(a.status == store_status::not_integer && !a.changed && now->second == *before,
                   "an add to a non-integer was not refused");
        break;
      }
      const auto sum = store::wrapping_add(*old, static_cast<std::int64_t>(store::get_u64(value.data())));
      fuzz_check(a.status == store_status::ok && a.changed && a.value.size() == 8 &&
                     static_cast<std::int64_t>(store::get_u64(a.value.data())) == sum &&
                     now->second == std::to_string(sum),
                 "an add did not store and answer the sum");
      break;
    }
  }
  if (a.parks) return;
  fuzz_check(a.value.size() <= boot::max_value_size, "a reply beyond the store's limits");
  std::array<unsigned char, store::reply_header_size> raw;
  store::put_reply_header(raw, a.status, static_cast<std::uint32_t>(a.value.size()));
  store::store_status status{};
  std::uint32_t size = 0;
  fuzz_check(store::parse_reply(raw, status, size).empty() && status == a.status && size == a.value.size(),
             "a reply header does not survive the client's parser");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const unsigned char> input(data, size);
  store::store_data kept;
  for (std::size_t at = 0; at < size;) {
    const auto t = store::take_request(input.subspan(at));
    if (t.status == store::taken_request::result::refused) {
      fuzz_check(!t.why.empty(), "a refusal does not say why");
      break;
    }
    if (t.status == store::taken_request::result::incomplete) {
      // The server allocates for an accepted header's sizes before the body arrives.
      if (size - at >= store::request_header_size)
        fuzz_check(t.request.header.key_size <= boot::max_key_size &&
                       t.request.header.value_size <= boot::max_value_size,
                   "a header was accepted whose sizes are beyond the store's limits");
      break;
    }
    check_request(input.subspan(at), t);
    const auto& [h, key, value] = t.request;
    const auto found = kept.find(key);
    const auto before = found == kept.end() ? std::nullopt : std::optional<std::string>(found->second);
    check_answer(h, value, before, kept, key, store::answer_request(kept, h, key, value));
    at += t.used;
  }

  if (size >= store::reply_header_size) {
    std::array<unsigned char, store::reply_header_size> raw, again;
    std::memcpy(raw.data(), data, raw.size());
    store::store_status status{};
    std::uint32_t value_size = 0;
    if (store::parse_reply(raw, status, value_size).empty()) {
      fuzz_check(value_size <= boot::max_value_size, "a reply header was accepted beyond the store's limits");
      store::put_reply_header(again, status, value_size);
      fuzz_check(again == raw, "an accepted reply header does not re-encode to its bytes");
    }
  }
  return 0;
}
