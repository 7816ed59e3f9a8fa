// The built-in ops, the traits, and the host reduction loop against a scalar loop.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <collectives/error.hpp>
#include <collectives/ops/builtin.hpp>
#include <collectives/ops/host_reduce.hpp>
#include <doctest/doctest.h>

namespace coll = collectives;

namespace {
struct minus {  // neither commutative nor associative: shows which operand is which
  int operator()(int a, int b) const { return a - b; }
};
struct no_plus {
  int v;
};
}  // namespace

static_assert(coll::reduce_op<coll::sum, float> && coll::reduce_op<coll::bit_xor, std::int64_t>);
static_assert(!coll::reduce_op<coll::bit_and, double>, "bitwise ops are for integers only");
static_assert(!coll::reduce_op<coll::sum, no_plus>, "sum needs +");
static_assert(!coll::reduce_op<coll::sum, std::string>, "elements travel as bytes");
static_assert(coll::is_commutative_v<coll::sum> && coll::is_commutative_v<coll::bit_or>);
static_assert(!coll::is_commutative_v<minus>, "user ops are not commutative unless they say so");
static_assert(coll::is_commutative_v<decltype(coll::commutative([](int a, int b) { return a + b; }))>);
static_assert(coll::has_finalize<coll::avg, float> && !coll::has_finalize<coll::sum, float>);

TEST_CASE("built-in ops compute what their names say") {
  CHECK(coll::sum{}(2, 3) == 5);
  CHECK(coll::prod{}(2.5, 4.0) == 10.0);
  CHECK(coll::min{}(-1, 7) == -1);
  CHECK(coll::max{}(-1.5f, -7.0f) == -1.5f);
  CHECK(coll::bit_and{}(0b1100, 0b1010) == 0b1000);
  CHECK(coll::bit_or{}(0b1100, 0b1010) == 0b1110);
  CHECK(coll::bit_xor{}(0b1100, 0b1010) == 0b0110);
  CHECK(coll::avg{}.finalize(10, 4) == 2);  // integers truncate toward zero
  CHECK(coll::avg{}.finalize(-10, 4) == -2);
  CHECK(coll::avg{}.finalize(10.0, 4) == 2.5);
  // Small integer types wrap instead of promoting to int.
  CHECK(coll::sum{}(std::uint8_t{200}, std::uint8_t{100}) == std::uint8_t{44});
}

TEST_CASE("min and max keep the left operand on ties and NaN on the right") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(coll::min{}(1.0, nan) == 1.0);
  CHECK(coll::max{}(1.0, nan) == 1.0);
  CHECK(std::signbit(coll::min{}(-0.0, 0.0)));
  CHECK(!std::signbit(coll::max{}(0.0, -0.0)));
}

TEST_CASE("the host loop equals a scalar loop, for every length and both operand orders") {
  using ops = coll::memory_ops<coll::host_memory>;
  minus op;
  for (std::size_t n = 0; n < 100; ++n) {
    INFO("n=", n);
    std::vector<int> dst(n), src(n), last(n), first(n);
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = int(i * 3 + 1);
      src[i] = int(i * i % 17);
      last[i] = dst[i] - src[i];
      first[i] = src[i] - dst[i];
    }
    auto a = dst, b = dst;
    ops::combine(a.data(), src.data(), n, op, coll::operand_order::received_last);
    ops::combine(b.data(), src.data(), n, op, coll::operand_order::received_first);
    CHECK(a == last);
    CHECK(b == first);
  }
}

TEST_CASE("finalize and copy in host memory") {
  using ops = coll::memory_ops<coll::host_memory>;
  std::vector<double> v{4, 8, -2};
  coll::avg avg;
  ops::finalize(v.data(), v.size(), avg, 4);
  CHECK(v == std::vector<double>{1, 2, -0.5});
  std::vector<double> w(3);
  ops::copy(w.data(), v.data(), 3);
  CHECK(w == v);
  auto room = ops::allocate<no_plus>(5);  // no default constructor needed
  CHECK(reinterpret_cast<std::uintptr_t>(room.get()) % 64 == 0);
}

TEST_CASE("errors carry the collectives category and map to portable conditions") {
  const coll::error e(coll::errc::timeout, "all_reduce: timed out");
  CHECK(e.code() == coll::errc::timeout);
  CHECK(e.code() == std::errc::timed_out);
  CHECK(std::string(e.code().category().name()) == "collectives");
  CHECK(std::string(e.what()).find("all_reduce") != std::string::npos);
  CHECK(coll::make_error_code(coll::errc::buffer_size_mismatch) == std::errc::invalid_argument);
  CHECK(coll::make_error_code(coll::errc::aborted) == std::errc::operation_canceled);
}
