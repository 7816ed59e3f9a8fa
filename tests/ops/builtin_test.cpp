// The built-in ops, the traits, and the host reduction loop against a scalar loop.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <collectives/element_types.hpp>
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

// ---- low-precision element types ----------------------------------------------

namespace {

// A format's values from their fields with ldexp, independently of element_types.hpp.
struct format_spec {
  int exponent_bits, mantissa_bits;
  bool ieee_specials, saturates;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int patterns() const { return 1 << (1 + exponent_bits + mantissa_bits); }
  bool is_nan(unsigned b) const {
    const unsigned e = (b >> mantissa_bits) & ((1u << exponent_bits) - 1), m = b & ((1u << mantissa_bits) - 1);
    const unsigned top = (1u << exponent_bits) - 1;
    return ieee_specials ? e == top && m != 0 : e == top && m == (1u << mantissa_bits) - 1;
  }
  double value(unsigned b) const {  // NaN patterns excluded
    const bool negative = (b >> (exponent_bits + mantissa_bits)) & 1;
    const int e = int((b >> mantissa_bits) & ((1u << exponent_bits) - 1));
    const double m = double(b & ((1u << mantissa_bits) - 1));
    double v;
    if (ieee_specials && e == (1 << exponent_bits) - 1) v = std::numeric_limits<double>::infinity();
    else if (e == 0) v = std::ldexp(m, 1 - bias() - mantissa_bits);
    else v = std::ldexp(1.0 + m / double(1 << mantissa_bits), e - bias());
    return negative ? -v : v;
  }
};

// The pattern float x rounds to: the nearest finite non-negative value, ties to the
// even pattern, then the overflow rule; by search, not by bit arithmetic. `finite`: the
// non-negative finite patterns, in increasing order (patterns increase with value).
unsigned nearest(const format_spec& f, const std::vector<unsigned>& finite, float x) {
  const unsigned sign = std::signbit(x) ? 1u << (f.exponent_bits + f.mantissa_bits) : 0u;
  const unsigned largest = finite.back();
  const double a = std::fabs(double(x));
  const double step_past = f.value(largest) - f.value(largest - 1);  // the value past the largest, as if there were one
  const double overflow_at = f.value(largest) + step_past / 2;
  const bool largest_even = (largest & 1u) == 0;
  if (a > overflow_at || (a == overflow_at && !largest_even) || std::isinf(x))
    return sign | (f.saturates ? largest : f.ieee_specials ? (((1u << f.exponent_bits) - 1) << f.mantissa_bits) : (f.patterns() / 2 - 1));
  auto above = std::lower_bound(finite.begin(), finite.end(), a, [&](unsigned b, double v) { return f.value(b) < v; });
  if (above == finite.end()) return sign | largest;
  if (f.value(*above) == a || above == finite.begin()) return sign | *above;
  const unsigned below = *(above - 1);
  const double up = f.value(*above) - a, down = a - f.value(below);
  if (up < down) return sign | *above;
  if (down < up) return sign | below;
  return sign | ((below & 1u) == 0 ? below : *above);
}

template <class T>
void check_format(const format_spec& f) {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);
  static_assert(coll::reduce_op<coll::sum, T> && coll::reduce_op<coll::prod, T> && coll::reduce_op<coll::min, T> &&
                coll::reduce_op<coll::max, T> && coll::reduce_op<coll::avg, T>);
  using bits_t = decltype(T{}.bits);
  // Every pattern to float, exactly; and back to the same pattern.
  for (int b = 0; b < f.patterns(); ++b) {
    CAPTURE(b);
    const float v = float(T::from_bits(bits_t(b)));
    if (f.is_nan(unsigned(b))) {
      CHECK(std::isnan(v));
      CHECK(std::isnan(float(T(v))));
      continue;
    }
    CHECK(double(v) == f.value(unsigned(b)));
    CHECK(std::signbit(v) == bool((b >> (f.exponent_bits + f.mantissa_bits)) & 1));
    if (!(std::isinf(v) && f.saturates)) CHECK(unsigned(T(v).bits) == unsigned(b));
  }
  // Floats to patterns: every value, every midpoint between neighbours (a tie) and the
  // floats just beside it, and random floats of every exponent, float subnormals too.
  std::vector<float> probes{0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), 1e-30f, 3e-39f};
  for (int b = 0; b + 1 < f.patterns() / 2; ++b) {
    if (f.is_nan(unsigned(b)) || f.is_nan(unsigned(b + 1)) || !std::isfinite(f.value(unsigned(b + 1)))) continue;
    const float mid = float((f.value(unsigned(b)) + f.value(unsigned(b + 1))) / 2);  // exact: at most 12 bits
    for (float x : {float(f.value(unsigned(b))), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      probes.push_back(x);
      probes.push_back(-x);
    }
  }
  const double top = f.value(unsigned(f.patterns() / 2 - 1 - (f.ieee_specials ? (1 << f.mantissa_bits) : 1)));
  for (float x : {float(top * 1.03), float(top * 1.07), float(top * 2)}) probes.push_back(x);
  std::mt19937 gen(7);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t u = gen();
    float x;
    std::memcpy(&x, &u, sizeof x);
    if (!std::isnan(x)) probes.push_back(x);
  }
  std::vector<unsigned> finite;
  for (unsigned b = 0; b < unsigned(f.patterns() / 2); ++b)
    if (!f.is_nan(b) && std::isfinite(f.value(b))) finite.push_back(b);
  for (float x : probes) {
    CAPTURE(x);
    CHECK(unsigned(T(x).bits) == nearest(f, finite, x));
  }
  CHECK(f.is_nan(unsigned(T(std::numeric_limits<float>::quiet_NaN()).bits)));
}

}  // namespace

TEST_CASE("low-precision types convert to float exactly and from float to the nearest, ties to even") {
  SUBCASE("bf16") { check_format<coll::bf16>({8, 7, true, false}); }
  SUBCASE("fp16") { check_format<coll::fp16>({5, 10, true, false}); }
  SUBCASE("fp8_e5m2, saturating") { check_format<coll::fp8_e5m2>({5, 2, true, true}); }
  SUBCASE("fp8_e4m3, saturating, no infinity") { check_format<coll::fp8_e4m3>({4, 3, false, true}); }
}

TEST_CASE("the built-in ops on low-precision types round once, as float does for float") {
  const coll::bf16 a(1.0f), b(0.00390625f);  // 2^-8: half of bf16's step at 1, a tie
  CHECK(float(coll::sum{}(a, b)) == 1.0f);    // rounds to even
  CHECK(float(coll::sum{}(a, coll::bf16(0.005f))) == 1.0078125f);
  CHECK(float(coll::prod{}(coll::bf16(3.0f), coll::bf16(0.5f))) == 1.5f);
  CHECK(float(coll::max{}(coll::fp16(-2.0f), coll::fp16(1.5f))) == 1.5f);
  CHECK(float(coll::min{}(coll::fp8_e4m3(-2.0f), coll::fp8_e4m3(1.5f))) == -2.0f);
  CHECK(float(coll::avg{}.finalize(coll::avg{}(coll::fp16(3.0f), coll::fp16(4.0f)), 2)) == 3.5f);
  CHECK(float(coll::sum{}(coll::fp8_e4m3(400.0f), coll::fp8_e4m3(400.0f))) == 448.0f);  // saturates
  CHECK(std::isinf(float(coll::sum{}(coll::fp16(60000.0f), coll::fp16(60000.0f)))));
  // The host loop reduces them like any element type.
  std::vector<coll::bf16> acc(37, coll::bf16(1.5f)), in(37, coll::bf16(2.25f));
  coll::sum op;
  coll::memory_ops<coll::host_memory>::combine(acc.data(), in.data(), acc.size(), op, coll::operand_order::received_last);
  for (const auto& x : acc) CHECK(float(x) == 3.75f);
}

namespace {

// combine() over every pair of patterns given, against the op applied one element at a
// time: the same bits, infinities included, or NaN for NaN. On a CPU with AVX2 the loop
// is the build's AVX2 copy (ops/host_reduce.hpp), which must not change a result. Which
// NaN comes out of NaN + NaN is IEEE's choice of either operand, and compilers may swap
// the operands of + and *, so a NaN's sign and payload are not compared.
template <class T, class Op>
void check_loop_bits(Op op, const std::vector<T>& x, const std::vector<T>& y) {
  for (const auto order : {coll::operand_order::received_last, coll::operand_order::received_first}) {
    std::vector<T> loop = x;
    coll::memory_ops<coll::host_memory>::combine(loop.data(), y.data(), x.size(), op, order);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const T one = order == coll::operand_order::received_last ? op(x[i], y[i]) : op(y[i], x[i]);
      const bool both_nan = std::isnan(float(one)) && std::isnan(float(loop[i]));
      differ += !both_nan && std::memcmp(&one, &loop[i], sizeof(T)) != 0;
    }
    CHECK(differ == 0);
  }
}

template <class T>
void check_loop_bits_of_every_op(std::size_t pairs) {
  using bits = decltype(T{}.bits);
  std::vector<T> x, y;
  if constexpr (sizeof(T) == 1) {  // every pair
    for (unsigned a = 0; a < 256; ++a)
      for (unsigned b = 0; b < 256; ++b) x.push_back(T::from_bits(bits(a))), y.push_back(T::from_bits(bits(b)));
  } else {
    std::mt19937 random(7);
    for (std::size_t i = 0; i < pairs; ++i) x.push_back(T::from_bits(bits(random()))), y.push_back(T::from_bits(bits(random())));
    // Whole runs of finite values, then of tiny ones whose sums are subnormal: a loop
    // that works a tile at a time (bf16's sum with AVX-512 BF16) takes its fast path
    // there, which NaNs scattered through random patterns keep it from.
    const auto finite = [&] {
      T v;
      do v = T::from_bits(bits(random()));
      while (!std::isfinite(float(v)));
      return v;
    };
    for (std::size_t i = 0; i < pairs; ++i) x.push_back(finite()), y.push_back(finite());
    for (std::size_t i = 0; i < pairs / 16; ++i) x.push_back(T::from_bits(bits(random() % 0x200))), y.push_back(T::from_bits(bits(random() % 0x200)));
  }
  check_loop_bits(coll::sum{}, x, y);
  check_loop_bits(coll::prod{}, x, y);
  check_loop_bits(coll::min{}, x, y);
  check_loop_bits(coll::max{}, x, y);
}

}  // namespace

TEST_CASE("the host loop on low-precision types gives each op's own bits, whatever the CPU runs it with") {
  check_loop_bits_of_every_op<coll::bf16>(1 << 18);
  check_loop_bits_of_every_op<coll::fp16>(1 << 18);
  check_loop_bits_of_every_op<coll::fp8_e4m3>(0);
  check_loop_bits_of_every_op<coll::fp8_e5m2>(0);
}
