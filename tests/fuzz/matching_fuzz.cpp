// The matching engine, driven as a wire would drive it by whatever bytes come in:
// message sizes, where they are split into pieces, and whether each receive is posted
// before its message arrives, while it arrives, or after.
//
// Properties: a fused receive's sink gets whole elements only, in order, covering the
// message exactly once with the bytes sent; messages with equal tags reach their
// receives first in, first out; every receive completes; nothing is held that fits
// the early budget.
#include <collectives/transport/detail/matching.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.hpp"

namespace {

using namespace collectives::transport_detail;

struct input {
  const std::uint8_t* data;
  std::size_t size;
  std::uint8_t next() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
};

std::byte content(std::size_t message, std::size_t i) { return std::byte(std::uint8_t(message * 31 + i * 7 + 1)); }

struct sink_state {
  std::vector<std::byte> got;
  std::size_t granule = 1, next = 0;
};

void consume(void* context, std::size_t offset, std::span<const std::byte> piece) {
  auto& s = *static_cast<sink_state*>(context);
  fuzz_check(offset % s.granule == 0 && piece.size() % s.granule == 0, "a fused receive gets whole elements");
  fuzz_check(offset == s.next, "a fused receive gets its pieces in order, each once");
  fuzz_check(offset + piece.size() <= s.got.size(), "a fused receive gets no more than its message");
  std::memcpy(s.got.data() + offset, piece.data(), piece.size());
  s.next = offset + piece.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  input in{data, size};
  matching_engine<> engine(0, 2, early_limits{.message_bytes = 512, .bytes_per_peer = 2048});
  const std::size_t granule = 1 + in.next() % 24;
  const bool fused = in.next() & 1;
  const std::size_t messages = 1 + in.next() % 4;
  const collectives::message_tag tag{7, 3};  // one tag for all: they must match in order

  std::vector<std::vector<std::byte>> sent(messages), received(messages);
  std::vector<sink_state> sinks(messages);
  std::vector<std::uint32_t> requests;
  std::size_t posted = 0;
  auto post_next = [&] {
    const std::size_t i = posted++;
    if (fused) {
      sinks[i] = {std::vector<std::byte>(sent[i].size()), granule, 0};
      requests.push_back(engine.post_recv_reduce(1, tag, sent[i].size(), granule, {&sinks[i], consume}));
    } else {
      received[i].resize(sent[i].size());
      requests.push_back(engine.post_recv(1, tag, received[i]));
    }
  };

  for (std::size_t m = 0; m < messages; ++m) {
    sent[m].resize(granule * (in.next() % 48));
    for (std::size_t i = 0; i < sent[m].size(); ++i) sent[m][i] = content(m, i);
  }
  for (std::size_t m = 0; m < messages; ++m) {
    // Post any number of the receives before the message starts.
    for (std::uint8_t before = in.next() % 3; before > 0 && posted < messages; --before) post_next();
    const landing l = engine.begin_message(1, tag, sent[m].size());
    if (l == landing::held) {
      fuzz_check(posted <= m, "a message with its receive posted is never held");
      while (posted <= m) post_next();  // the wire offers it again once its receive is posted
      fuzz_check(engine.begin_message(1, tag, sent[m].size()) == landing::receive, "a held message lands once its receive is posted");
    }
    for (std::size_t at = 0; at < sent[m].size();) {
      const std::size_t piece = std::min<std::size_t>(1 + in.next() % 97, sent[m].size() - at);
      if (in.next() % 5 == 0 && posted < messages) post_next();  // posted while it arrives
      engine.deliver(1, std::span(sent[m]).subspan(at, piece));
      at += piece;
    }
    fuzz_check(!engine.in_message(1), "a message ends once all its bytes are delivered");
  }
  while (posted < messages) post_next();
  for (std::size_t i = 0; i < messages; ++i) {
    fuzz_check(engine.finish(requests[i]), "every receive completes once its message arrived");
    if (fused) {
      fuzz_check(sinks[i].next == sent[i].size() && sinks[i].got == sent[i], "a fused receive gets exactly its message");
    } else {
      fuzz_check(received[i] == sent[i], "equal tags match first in, first out");
    }
  }
  return 0;
}
