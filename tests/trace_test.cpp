// The trace (COLLECTIVES_TRACE, collectives/trace.hpp): blocking and non-blocking calls
// at 1 and 3 ranks are recorded, and the file is trace-event JSON that a viewer can
// draw: every rank has an event for every call, steps lie within their call on its
// row, calls that share a row do not overlap, and posts name real peers.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <collectives/collectives.hpp>
#include <collectives/trace.hpp>

namespace coll = collectives;
using comm = coll::communicator<coll::inproc>;
using namespace std::chrono_literals;

namespace {

// ---- Just enough of a JSON reader to check the file's structure ---------------------

struct value {
  enum class kind { null, boolean, number, string, array, object } type = kind::null;
  double number = 0;
  std::string text;
  std::vector<value> items;      // an array's, or an object's values
  std::vector<std::string> keys;  // an object's names, in order (a vector of pairs cannot hold `value` yet)

  const value* find(const std::string& name) const {
    for (std::size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == name) return &items[i];
    return nullptr;
  }
  const value& operator[](const std::string& name) const {
    if (const value* v = find(name)) return *v;
    throw std::runtime_error("no field " + name);
  }
};

class reader {
 public:
  explicit reader(std::string text) : s_(std::move(text)) {}

  value document() {
    value v = any();
    skip_blanks();
    if (at_ != s_.size()) fail("text after the document");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }
  void skip_blanks() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  char peek() {
    skip_blanks();
    if (at_ == s_.size()) fail("unexpected end");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected ") + c);
    ++at_;
  }
  bool word(const char* w) {
    const std::string_view want(w);
    if (s_.compare(at_, want.size(), want) != 0) return false;
    at_ += want.size();
    return true;
  }

  value any() {
    value v;
    const char c = peek();
    if (c == '{') {
      v.type = value::kind::object;
      ++at_;
      if (peek() == '}') return ++at_, v;
      do {
        v.keys.push_back(string());
        expect(':');
        v.items.push_back(any());
      } while (peek() == ',' && ++at_);
      expect('}');
    } else if (c == '[') {
      v.type = value::kind::array;
      ++at_;
      if (peek() == ']') return ++at_, v;
      do v.items.push_back(any());
      while (peek() == ',' && ++at_);
      expect(']');
    } else if (c == '"') {
      v.type = value::kind::string;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.type = value::kind::boolean;
      v.number = s_[at_ - 1] == 'e' && s_[at_ - 2] == 'u';
    } else if (word("null")) {
    } else {
      v.type = value::kind::number;
      std::size_t used = 0;
      try {
        v.number = std::stod(s_.substr(at_, 40), &used);
      } catch (const std::exception&) {
        fail("not a value");
      }
      at_ += used;
    }
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      if (static_cast<unsigned char>(s_[at_]) < ' ') fail("a control character in a string");
      if (s_[at_] == '\\') ++at_;  // the file escapes only " and backslash
      out += s_[at_++];
    }
    if (at_ == s_.size()) fail("an unterminated string");
    ++at_;
    return out;
  }

  std::string s_;
  std::size_t at_ = 0;
};

value read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in, "cannot open " << path);
  return reader(std::string(std::istreambuf_iterator<char>(in), {})).document();
}

// ---- What the tests look at ------------------------------------------------------

struct slice {
  std::string name, cat;
  int rank = 0, row = 0;
  double begin = 0, end = 0;  // microseconds
  const value* args = nullptr;
};

// The complete events between two moments (in microseconds of the steady clock), and
// each rank's row name: the whole structure is checked on the way.
struct trace_file {
  value doc;
  std::vector<slice> slices;
  std::map<int, std::string> process_names;

  trace_file(const std::string& path, double from, double to) : doc(read_json(path)) {
    REQUIRE(doc.type == value::kind::object);
    CHECK(doc["displayTimeUnit"].text == "ns");
    const value& events = doc["traceEvents"];
    REQUIRE(events.type == value::kind::array);
    for (const value& e : events.items) {
      REQUIRE(e.type == value::kind::object);
      const std::string ph = e["ph"].text;
      REQUIRE(e["pid"].type == value::kind::number);
      REQUIRE(e["tid"].type == value::kind::number);
      if (ph == "M") {
        if (e["name"].text == "process_name") process_names[int(e["pid"].number)] = e["args"]["name"].text;
        continue;
      }
      REQUIRE(ph == "X");
      REQUIRE(e["ts"].type == value::kind::number);
      REQUIRE(e["dur"].type == value::kind::number);
      CHECK(e["dur"].number >= 0);
      REQUIRE(e["args"].type == value::kind::object);
      const double ts = e["ts"].number;
      if (ts < from || ts > to) continue;
      slices.push_back({e["name"].text, e["cat"].text, int(e["pid"].number), int(e["tid"].number), ts,
                        ts + e["dur"].number, &e["args"]});
    }
  }

  std::vector<const slice*> calls_of(int rank) const {
    std::vector<const slice*> out;
    for (const slice& s : slices)
      if (s.rank == rank && s.cat == "call") out.push_back(&s);
    std::sort(out.begin(), out.end(), [](const slice* a, const slice* b) { return a->begin < b->begin; });
    return out;
  }
};

double now_us() { return double(coll::trace::now_ns()) / 1000.0; }

// The calls each rank makes, in the order it starts them.
const std::vector<std::string> expected_calls{"all_reduce", "broadcast", "all_gather", "all_reduce", "all_gather",
                                              "all_reduce", "barrier"};

void some_calls(comm& c) {
  const int p = c.size();
  std::vector<float> x(40'000, float(c.rank() + 1)), shard(1000, float(c.rank())), full(1000 * std::size_t(p));
  coll::all_reduce(c, x, coll::sum{});
  coll::broadcast(c, x, 0);
  coll::all_gather(c, shard, full);
  auto first = coll::iall_reduce(c, x, coll::max{});  // two calls in flight at once
  auto second = coll::iall_gather(c, shard, full);
  std::vector<int> one{c.rank()};
  coll::all_reduce(c, one, coll::sum{});  // a blocking call while they move
  coll::wait_all(second, first);
  coll::barrier(c);
  CHECK(one[0] == p * (p - 1) / 2);
}

// Checks each rank's calls in `file` against `expected` (names, in the order started),
// and their steps; returns how many messages were posted.
std::size_t check_calls(const trace_file& file, int ranks, const std::vector<std::string>& expected) {
  std::size_t posts = 0;
  for (int rank = 0; rank < ranks; ++rank) {
    CAPTURE(rank);
    CHECK(file.process_names.at(rank) == "rank " + std::to_string(rank));
    const auto calls = file.calls_of(rank);
    REQUIRE(calls.size() == expected.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i]->name == expected[i]);
      CHECK(calls[i]->end >= calls[i]->begin);
      CHECK((*calls[i]->args)["size"].number == ranks);
      CHECK(calls[i]->args->find("failed") == nullptr);
      const std::string algorithm = (*calls[i]->args)["algorithm"].text;  // the one automatic chose
      CHECK((algorithm == "ring" || algorithm == "double_binary_tree" || algorithm == "direct" ||
             algorithm == "halving_doubling" || algorithm == "hierarchical"));
      if (i > 0) CHECK((*calls[i]->args)["call"].number > (*calls[i - 1]->args)["call"].number);
      for (std::size_t j = 0; j < i; ++j)  // calls that share a row follow one another
        if (calls[j]->row == calls[i]->row) CHECK(calls[j]->end <= calls[i]->begin);
    }
    for (const slice& s : file.slices) {
      if (s.rank != rank || s.cat == "call") continue;
      CAPTURE(s.name);
      const double call_number = (*s.args)["call"].number;
      const bool within = std::any_of(calls.begin(), calls.end(), [&](const slice* c) {
        return c->row == s.row && (*c->args)["call"].number == call_number && c->begin <= s.begin && s.end <= c->end;
      });
      CHECK(within);
      if (s.cat == "post" || s.cat == "complete") {
        const int peer = int((*s.args)["peer"].number);
        CHECK(peer >= 0);
        CHECK(peer < ranks);
        CHECK(peer != rank);
        CHECK((*s.args)["bytes"].number > 0);
        posts += s.cat == "post";
      }
    }
  }
  return posts;
}

}  // namespace

TEST_CASE("a part's name has the process's lowest rank before the extension") {
  CHECK(coll::trace::part_path("trace.json", 3) == "trace.rank3.json");
  CHECK(coll::trace::part_path("out.d/trace", 0) == "out.d/trace.rank0");
  CHECK(coll::trace::part_path("/tmp/.trace", 12) == "/tmp/.trace.rank12");
}

TEST_CASE("every rank's calls and their steps are written as trace events") {
  const std::string path = "trace_test.json";  // in the test's working directory
  coll::trace::start(path);
  REQUIRE(coll::trace::enabled());
  for (const int ranks : {1, 3}) {
    CAPTURE(ranks);
    const double from = now_us();
    coll::run_ranks(ranks, some_calls, 30s);
    const double to = now_us();
    REQUIRE(coll::trace::flush() == coll::trace::part_path(path, 0));
    const std::size_t posts = check_calls(trace_file(coll::trace::part_path(path, 0), from, to), ranks, expected_calls);
    if (ranks == 1) CHECK(posts == 0);
    else CHECK(posts > 0);
  }
}

TEST_CASE("each call records the algorithm it ran") {
  coll::trace::start("trace_test.json");
  const double from = now_us();
  coll::run_ranks(3, [](comm& c) {
    std::vector<int> x(1000, 1);
    coll::all_reduce<coll::ring>(c, x, coll::sum{});
    coll::all_reduce<coll::double_binary_tree>(c, x, coll::sum{});
    auto h = coll::iall_reduce<coll::halving_doubling>(c, x, coll::sum{});
    h.wait();
    coll::broadcast<coll::direct>(c, x, 1);
    CHECK(x[0] == 27);
  }, 30s);
  const double to = now_us();
  const trace_file file(coll::trace::flush(), from, to);
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<std::string> ran;
    for (const slice* call : file.calls_of(rank)) ran.push_back((*call->args)["algorithm"].text);
    CHECK(ran == std::vector<std::string>{"ring", "double_binary_tree", "halving_doubling", "direct"});
  }
}

TEST_CASE("calls a progress thread moves are recorded as well") {
  coll::trace::start("trace_test.json");
  const double from = now_us();
  coll::run_ranks(3, [](comm& c) {
    c.start_progress_thread();
    std::vector<double> x(100'000, 1.0);
    auto h = coll::iall_reduce(c, x, coll::sum{});
    std::this_thread::sleep_for(20ms);  // the thread moves the call meanwhile
    h.wait();
    CHECK(x[0] == 3.0);
  }, 30s);
  const double to = now_us();
  CHECK(check_calls(trace_file(coll::trace::flush(), from, to), 3, {"all_reduce"}) > 0);
}

TEST_CASE("a call that fails is recorded as failed") {
  coll::trace::start("trace_test.json");
  const double from = now_us();
  coll::run_ranks(2, [](comm& c) {
    std::vector<int> never_sent(4);
    coll::scoped_timeout quick(c, 50ms);
    CHECK_THROWS_AS(coll::recv(c, never_sent, 1 - c.rank()), coll::error);  // neither rank sends
  }, 10s);
  const double to = now_us();
  const trace_file file(coll::trace::flush(), from, to);
  for (int rank = 0; rank < 2; ++rank) {
    const auto calls = file.calls_of(rank);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]->args->find("failed") != nullptr);
    CHECK(calls[0]->end - calls[0]->begin >= 40'000);  // it waited for its deadline
  }
}

TEST_CASE("a flush while another thread records reads only what that thread has published") {
  coll::trace::start("trace_test.json");
  auto& recorder = coll::trace::recorder::instance();
  std::thread writer([&] {
    for (int i = 0; i < 50'000; ++i) {  // some 50 chunks: the flushes meet new ones
      coll::trace::event e;
      e.start_ns = coll::trace::now_ns();
      e.call_id = recorder.next_call_id();
      e.rank = 9;  // a rank no other test uses
      std::strcpy(e.name, "recorded");
      recorder.record(e);
    }
  });
  for (int i = 0; i < 5; ++i) CHECK_FALSE(coll::trace::flush().empty());
  writer.join();
  const trace_file file(coll::trace::flush(), 0, 1e300);
  CHECK(file.calls_of(9).size() == 50'000);
}

TEST_CASE("a process that ends in std::terminate (an uncaught error) still writes its calls") {
  const std::string path = "trace_test_terminate.json";
  std::remove(coll::trace::part_path(path, 0).c_str());
  const double from = now_us();
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the child: records one call at 2 ranks, then ends as an uncaught error would
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, STDERR_FILENO);  // terminate's own words
    coll::trace::start(path);
    coll::run_ranks(2, [](comm& c) {
      std::vector<int> x(100, 1);
      coll::all_reduce(c, x, coll::sum{});
    }, 10s);
    std::terminate();
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));  // aborted, as terminate does after writing
  const trace_file file(coll::trace::part_path(path, 0), from, now_us());
  for (int rank = 0; rank < 2; ++rank) CHECK(file.calls_of(rank).size() == 1);
}
