// The device reductions (device/reduce.cuh) against a serial host computation: every
// built-in op, a user op on a user type, a non-commutative one in both operand
// orders, many inputs at once, and finalize. Label gpu: without a device it exits 77.
// Built with the C++ compiler: the kernels come from reductions.cu, as the device
// collectives test's do.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <collectives/device/reductions.hpp>
#include <collectives/ops/builtin.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../../collectives/values.hpp"  // the grids' inputs
#include "../device_ops.hpp"
#include "backend.hpp"

using namespace testing;

namespace {

const std::size_t counts[] = {0, 1, 7, 1000, (std::size_t{1} << 20) + 3};

template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// combine in both operand orders, then finalize where the op has it.
template <class T, class Op>
void check_combine() {
  Op op{};
  for (std::size_t n : counts) {
    for (auto order : {coll::operand_order::received_last, coll::operand_order::received_first}) {
      const auto dst = inputs<T, Op>(0, n), received = inputs<T, Op>(1, n);
      std::vector<T> want(n);
      for (std::size_t i = 0; i < n; ++i)
        want[i] = order == coll::operand_order::received_last ? op(dst[i], received[i]) : op(received[i], dst[i]);
      device_vector<T> d{std::span<const T>(dst)}, r{std::span<const T>(received)};
      coll::device::combine(d.span().data(), r.span().data(), n, op, order, nullptr);
      if constexpr (coll::has_finalize<Op, T>) {
        coll::device::finalize(d.span().data(), n, op, 3, nullptr);
        for (auto& x : want) x = op.finalize(x, 3);
      }
      INFO(typeid(T).name(), " ", typeid(Op).name(), " n=", n, order == coll::operand_order::received_last ? " received last" : " received first");
      CHECK(same(d.to_host(), want));
    }
  }
}

template <class T, class Op>
void check_three_inputs() {
  Op op{};
  for (std::size_t n : counts) {
    const auto a = inputs<T, Op>(0, n), b = inputs<T, Op>(1, n), c = inputs<T, Op>(2, n);
    std::vector<T> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = op(op(a[i], b[i]), c[i]);
    device_vector<T> da{std::span<const T>(a)}, db{std::span<const T>(b)}, dc{std::span<const T>(c)}, out(n);
    coll::device::reduce(out.span().data(), n, op, nullptr, da.span().data(), db.span().data(), dc.span().data());
    INFO(typeid(T).name(), " ", typeid(Op).name(), " n=", n);
    CHECK(same(out.to_host(), want));
  }
}

}  // namespace

TEST_CASE("device combine: every built-in op on int32 and float, both operand orders") {
  check_combine<std::int32_t, coll::sum>();
  check_combine<std::int32_t, coll::prod>();
  check_combine<std::int32_t, coll::min>();
  check_combine<std::int32_t, coll::max>();
  check_combine<std::int32_t, coll::avg>();
  check_combine<std::int32_t, coll::bit_and>();
  check_combine<std::int32_t, coll::bit_or>();
  check_combine<std::int32_t, coll::bit_xor>();
  check_combine<float, coll::sum>();
  check_combine<float, coll::prod>();
  check_combine<float, coll::min>();
  check_combine<float, coll::max>();
  check_combine<float, coll::avg>();
  check_combine<double, coll::sum>();
}

TEST_CASE("device combine: user ops on user types, commutative and not") {
  check_combine<scored, device_arg_max>();
  check_combine<mat2, device_mat_mul>();  // the orders give different products
}

TEST_CASE("device reduce: three inputs in one pass, left to right") {
  check_three_inputs<float, coll::sum>();
  check_three_inputs<std::int32_t, coll::bit_xor>();
  check_three_inputs<mat2, device_mat_mul>();
}

int main(int argc, char** argv) {
  if (!have_device()) {
    std::printf("SKIPPED: no CUDA device in this process (cudaGetDeviceCount found none)\n");
    return 77;
  }
  return doctest::Context(argc, argv).run();
}
