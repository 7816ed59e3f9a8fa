// Low-precision element types: bf16, fp16, fp8_e4m3 and fp8_e5m2, laid out as CUDA's
// __nv_bfloat16, __half, __nv_fp8_e4m3 and __nv_fp8_e5m2 (their bits and nothing else),
// usable in host and device code.
//
// Each converts from float with round-to-nearest-even and to float exactly. Arithmetic
// goes through float and rounds the result once: float carries at least 2p + 2 bits of
// each type's p, so that rounding twice gives the correctly rounded result, and the
// built-in ops (sum, prod, min, max, avg) work on them as on float. A sum of many of
// them rounds at each add, as NCCL's does (docs/precision.md).
//
// Overflow: bf16 and fp16 round to infinity past their largest finite value, as IEEE
// formats do. The fp8 types saturate, as CUDA's __nv_fp8_e4m3 and __nv_fp8_e5m2 do
// (__NV_SATFINITE): a value past the largest finite one, infinity too, becomes that
// one (448 for e4m3, 57344 for e5m2), with its sign; NaN stays NaN. fp8_e4m3 has no
// infinity (OCP's E4M3FN): its all-ones pattern is NaN.
#pragma once

#include <cstdint>
#include <cstring>

#include "config.hpp"

namespace collectives {

namespace detail {

// A binary floating-point format of at most 16 bits: `exponent_bits`, `mantissa_bits`
// (the stored ones), whether its largest exponent holds infinities and NaNs (IEEE) or
// finite values but the all-ones pattern, which is NaN (E4M3FN), and whether a
// conversion that overflows saturates to the largest finite value.
template <class Bits, int exponent_bits, int mantissa_bits, bool ieee_specials, bool saturates>
struct narrow_format {
  static constexpr int bias = (1 << (exponent_bits - 1)) - 1;
  static constexpr std::uint32_t exponent_mask = (1u << exponent_bits) - 1;
  static constexpr std::uint32_t mantissa_mask = (1u << mantissa_bits) - 1;
  static constexpr Bits sign_bit = Bits(1u << (exponent_bits + mantissa_bits));
  static constexpr Bits nan_bits = ieee_specials ? Bits((exponent_mask << mantissa_bits) | (1u << (mantissa_bits - 1)))
                                                 : Bits((exponent_mask << mantissa_bits) | mantissa_mask);

  // 2^(1 - bias - mantissa_bits) as float bits: a normal float, or for bf16 a subnormal.
  static constexpr int subnormal_step_exponent = 1 - bias - mantissa_bits;
  static constexpr std::uint32_t subnormal_step_bits = subnormal_step_exponent >= -126
                                                           ? std::uint32_t(subnormal_step_exponent + 127) << 23
                                                           : 1u << (subnormal_step_exponent + 149);

  COLLECTIVES_HOST_DEVICE static std::uint32_t bits_of(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }
  COLLECTIVES_HOST_DEVICE static float float_of(std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }

  // bf16 is float's upper half: shifts and one add, without branches, so that the
  // reduction loops over it vectorize.
  static constexpr bool float_upper_half = exponent_bits == 8 && mantissa_bits == 7 && ieee_specials && !saturates;

  // fp16 by shifts, adds and selects as well: a subnormal goes through one float add or
  // subtract, which rounds as the format does (the well-known bit-level conversions,
  // with masks for their branches).
  static constexpr bool ieee_half = exponent_bits == 5 && mantissa_bits == 10 && ieee_specials && !saturates;

  COLLECTIVES_HOST_DEVICE static float to_float(Bits b) {
    if constexpr (float_upper_half) return float_of(std::uint32_t(b) << 16);
    else if constexpr (ieee_half) return half_to_float(b);
    else return to_float_by_fields(b);
  }

  // `yes` where `condition`, else `no`, by masks: a ?: here became a branch, which kept
  // the loops around it from vectorizing.
  COLLECTIVES_HOST_DEVICE static std::uint32_t select(bool condition, std::uint32_t yes, std::uint32_t no) {
    const std::uint32_t mask = 0u - std::uint32_t(condition);
    return (yes & mask) | (no & ~mask);
  }

  COLLECTIVES_HOST_DEVICE static float half_to_float(Bits b) {
    constexpr std::uint32_t shifted_exponent = 0x7C00u << 13;
    const std::uint32_t moved = (std::uint32_t(b) & 0x7FFFu) << 13;  // exponent and mantissa, in place
    const std::uint32_t e = moved & shifted_exponent;
    const std::uint32_t normal = moved + ((127u - 15u) << 23);
    const std::uint32_t special = (normal + ((128u - 16u) << 23)) | select(moved & 0x7FFFFFu, 0x400000u, 0u);  // NaN: quiet
    // zero or subnormal: the mantissa as a float of exponent -14, less that float's one
    const float subnormal = float_of(normal + (1u << 23)) - float_of(113u << 23);
    const std::uint32_t magnitude = select(e == shifted_exponent, special, select(e == 0, bits_of(subnormal), normal));
    return float_of(magnitude | (std::uint32_t(b) & 0x8000u) << 16);
  }

  COLLECTIVES_HOST_DEVICE static Bits float_to_half(std::uint32_t u) {
    const std::uint32_t sign = u & 0x80000000u, magnitude = u ^ sign;
    const std::uint32_t special = select(magnitude > 0x7F800000u, nan_bits, 0x7C00u);  // from 65536 up: infinity
    // below 2^-14: a float add aligns the mantissa to the subnormal step and rounds
    constexpr std::uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const std::uint32_t subnormal = bits_of(float_of(magnitude) + float_of(magic)) - magic;
    const std::uint32_t normal = (magnitude + ((15u - 127u) << 23) + 0xFFFu + ((magnitude >> 13) & 1u)) >> 13;
    const std::uint32_t field =
        select(magnitude >= ((127u + 16u) << 23), special, select(magnitude < (113u << 23), subnormal, normal));
    return Bits(field | sign >> 16);
  }

  COLLECTIVES_HOST_DEVICE static float to_float_by_fields(Bits b) {
    const std::uint32_t sign = std::uint32_t(b & sign_bit) << (31 - exponent_bits - mantissa_bits);
    const std::uint32_t e = (std::uint32_t(b) >> mantissa_bits) & exponent_mask;
    const std::uint32_t m = std::uint32_t(b) & mantissa_mask;
    if (e == exponent_mask && (ieee_specials || m == mantissa_mask)) {  // infinity, NaN
      if (ieee_specials && m == 0) return float_of(sign | 0x7F800000u);
      return float_of(sign | 0x7FC00000u | (m << (23 - mantissa_bits)));
    }
    if (e == 0) {  // zero or subnormal: m times the subnormal step, exact in float
      const float v = float(m) * float_of(subnormal_step_bits);
      return sign ? -v : v;
    }
    return float_of(sign | ((e + 127 - bias) << 23) | (m << (23 - mantissa_bits)));
  }

  // Round to nearest, ties to even.
  COLLECTIVES_HOST_DEVICE static Bits from_float(float f) {
    const std::uint32_t u = bits_of(f);
    if constexpr (float_upper_half) {  // ties to even: add just under half, plus the kept lowest bit
      const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
      const std::uint32_t nan = ((u >> 16) & sign_bit) | nan_bits;
      const std::uint32_t is_nan = 0u - std::uint32_t((u & 0x7FFFFFFFu) > 0x7F800000u);  // all ones or zero
      return Bits((nan & is_nan) | (rounded & ~is_nan));
    } else if constexpr (ieee_half) {
      return float_to_half(u);
    } else {
      return from_float_rounded(u);
    }
  }

  COLLECTIVES_HOST_DEVICE static Bits from_float_rounded(std::uint32_t u) {
    const Bits sign = (u >> 31) ? sign_bit : Bits(0);
    const std::uint32_t magnitude = u & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) return Bits(sign | nan_bits);
    const std::uint32_t largest = ieee_specials ? ((exponent_mask << mantissa_bits) - 1u)
                                                : ((exponent_mask << mantissa_bits) | (mantissa_mask - 1u));
    const Bits overflow = saturates ? Bits(sign | largest)
                          : ieee_specials ? Bits(sign | (exponent_mask << mantissa_bits)) : Bits(sign | nan_bits);
    if (magnitude == 0x7F800000u) return overflow;
    // The exponent field the value would have (a float subnormal's exponent is that of
    // the smallest normal, without the leading one).
    const bool float_normal = magnitude >= 0x00800000u;
    const int e = (float_normal ? int(magnitude >> 23) : 1) - 127 + bias;
    // The value as an integer multiple of the format's step at that exponent (the
    // subnormal step below the normal range): keep that many bits, round the rest.
    const std::uint32_t significand = (magnitude & 0x7FFFFFu) | (float_normal ? 0x800000u : 0u);
    const int shift = 23 - mantissa_bits + (e < 1 ? 1 - e : 0);
    if (shift > 31) return sign;  // far below half the smallest subnormal: zero
    const std::uint32_t kept = significand >> shift;
    const std::uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1);
    const std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
    // `rounded` counts steps from zero: subnormal steps when e < 1, else the mantissa
    // with its leading one; a carry into the next binade lands on the right pattern.
    const std::uint32_t field = e < 1 ? rounded : (std::uint32_t(e) << mantissa_bits) + rounded - (1u << mantissa_bits);
    if (field > largest) return overflow;
    return Bits(sign | field);
  }
};

// The operators every low-precision type shares, through float.
template <class T>
struct narrow_arithmetic {
  COLLECTIVES_HOST_DEVICE friend T operator+(T a, T b) { return T(float(a) + float(b)); }
  COLLECTIVES_HOST_DEVICE friend T operator-(T a, T b) { return T(float(a) - float(b)); }
  COLLECTIVES_HOST_DEVICE friend T operator*(T a, T b) { return T(float(a) * float(b)); }
  COLLECTIVES_HOST_DEVICE friend T operator/(T a, T b) { return T(float(a) / float(b)); }
  COLLECTIVES_HOST_DEVICE friend T operator-(T a) { return T(-float(a)); }
  COLLECTIVES_HOST_DEVICE friend bool operator<(T a, T b) { return float(a) < float(b); }
  COLLECTIVES_HOST_DEVICE friend bool operator>(T a, T b) { return float(a) > float(b); }
  COLLECTIVES_HOST_DEVICE friend bool operator<=(T a, T b) { return float(a) <= float(b); }
  COLLECTIVES_HOST_DEVICE friend bool operator>=(T a, T b) { return float(a) >= float(b); }
  COLLECTIVES_HOST_DEVICE friend bool operator==(T a, T b) { return float(a) == float(b); }  // as float: -0 == 0, NaN != NaN
};

// One type: its bits, explicit conversions from and to float, and from_bits.
template <class Self, class Format, class Bits>
struct narrow_value : narrow_arithmetic<Self> {
  using format = Format;
  Bits bits;
  narrow_value() = default;
  COLLECTIVES_HOST_DEVICE explicit narrow_value(float f) : bits(Format::from_float(f)) {}
  COLLECTIVES_HOST_DEVICE explicit operator float() const { return Format::to_float(bits); }
  COLLECTIVES_HOST_DEVICE static Self from_bits(Bits b) {
    Self s;
    s.bits = b;
    return s;
  }
};

}  // namespace detail

struct bf16 : detail::narrow_value<bf16, detail::narrow_format<std::uint16_t, 8, 7, true, false>, std::uint16_t> {
  using narrow_value::narrow_value;  // __nv_bfloat16
};
struct fp16 : detail::narrow_value<fp16, detail::narrow_format<std::uint16_t, 5, 10, true, false>, std::uint16_t> {
  using narrow_value::narrow_value;  // __half
};
struct fp8_e5m2 : detail::narrow_value<fp8_e5m2, detail::narrow_format<std::uint8_t, 5, 2, true, true>, std::uint8_t> {
  using narrow_value::narrow_value;  // __nv_fp8_e5m2
};
struct fp8_e4m3 : detail::narrow_value<fp8_e4m3, detail::narrow_format<std::uint8_t, 4, 3, false, true>, std::uint8_t> {
  using narrow_value::narrow_value;  // __nv_fp8_e4m3 (E4M3FN: no infinity)
};
static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2 && sizeof(fp8_e5m2) == 1 && sizeof(fp8_e4m3) == 1);

}  // namespace collectives
