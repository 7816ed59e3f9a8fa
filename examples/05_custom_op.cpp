// 05: writing your own reduce op.
//
// A reduce op is any callable `T op(const T&, const T&)` on a trivially copyable T,
// and it must be associative. Whether it is also commutative is for the op to say,
// because that decides which algorithms may use it:
//
//   declared commutative   (a member `static constexpr bool commutative = true;`, or
//                          the op wrapped with collectives::commutative(f)): every
//                          algorithm may use it, ring included, which combines in
//                          whatever order the data comes round;
//   not declared           the library applies it in rank order,
//                          x0 op x1 op ... op x(P-1): direct, double_binary_tree and
//                          automatic do so, and ring refuses it at compile time with
//                          a static_assert that says what to do.
//
// Three ops, one per case:
//   1. running statistics (count, mean, M2) merged the Welford way: a functor that
//      declares itself commutative;
//   2. a sum modulo a number chosen at run time: a lambda carrying state, wrapped
//      with collectives::commutative;
//   3. the 2x2 matrix product, which is not commutative: the rank order matters.
//
// usage: 05_custom_op [ranks = 4] [modulus = 1000000007]                ranks as threads
//        collectives-run -n 4 05_custom_op [modulus = 1000000007]       ranks as processes
// (see ranks.hpp: the same code runs either way)

#include <collectives/collectives.hpp>

#include "ranks.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace coll = collectives;

namespace {

// 1. Count, mean and M2 (the sum of squared deviations from the mean) of a set of
// samples; the variance is M2 / count. Summing x and x*x instead would lose most of
// its digits to cancellation whenever the mean is large next to the spread, as here.
struct statistics {
  double count = 0, mean = 0, m2 = 0;
};

statistics statistics_of(const std::vector<double>& samples) {
  statistics s;
  for (double x : samples) {  // Welford's update, one sample at a time
    s.count += 1;
    const double delta = x - s.mean;
    s.mean += delta / s.count;
    s.m2 += delta * (x - s.mean);
  }
  return s;
}

// Merges the statistics of two disjoint sets of samples (Chan, Golub and LeVeque).
// Swapping the operands may change the last bits, as it may for a floating-point sum,
// but not the meaning, so the op declares itself commutative just as collectives::sum
// does.
struct merge_statistics {
  static constexpr bool commutative = true;
  statistics operator()(const statistics& a, const statistics& b) const {
    if (a.count == 0) return b;
    if (b.count == 0) return a;
    const double count = a.count + b.count, delta = b.mean - a.mean;
    return {count, a.mean + delta * (b.count / count), a.m2 + b.m2 + delta * delta * (a.count * (b.count / count))};
  }
};

// Rank r's samples: a million plus a small spread, in shards of different sizes.
std::size_t shard_size(int rank) { return 100 + 40 * std::size_t(rank); }
std::size_t shard_offset(int rank) {
  std::size_t offset = 0;
  for (int q = 0; q < rank; ++q) offset += shard_size(q);
  return offset;
}
double sample(std::size_t g) { return 1e6 + double(g * 7919 % 1000) / 1000.0; }

// 3. [a b; c d]. Unsigned arithmetic wraps modulo 2^64, which keeps the product
// exact and associative at any rank count.
struct mat2 {
  std::uint64_t a, b, c, d;
  bool operator==(const mat2&) const = default;
};

// No `commutative` member: A B != B A in general, so the library keeps rank order.
struct mat_mul {
  mat2 operator()(const mat2& x, const mat2& y) const {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
};

// Rank r holds [r+1 1; 1 0]. Their product in rank order has the continued fraction
// 1 + 1/(2 + 1/(3 + ...)) as the ratio of its first column, a / c.
mat2 matrix_of(int rank) { return {std::uint64_t(rank) + 1, 1, 1, 0}; }

std::string to_string(const mat2& m) {
  return "[" + std::to_string(m.a) + " " + std::to_string(m.b) + "; " + std::to_string(m.c) + " " +
         std::to_string(m.d) + "]";
}

bool agrees(double got, double want, double tolerance) { return std::abs(got - want) <= tolerance * std::abs(want); }

}  // namespace

int main(int argc, char** argv) {
  const examples::command_line command(argc, argv);
  // The modulus is known only at run time, so the op has to carry it as state.
  // (At most 2^32, so that the sum of two residues cannot overflow.)
  const long long modulus_argument = command.number(0, 1'000'000'007);
  if (!command.well_formed(1) || modulus_argument < 2 || modulus_argument > (1LL << 32))
    return command.usage("[modulus in 2 .. 2^32]");
  const std::uint64_t modulus = std::uint64_t(modulus_argument);

  return examples::run_example(command, [&](auto& comm) {
    const int ranks = comm.size(), r = comm.rank();

    // Serial references. Statistics: two passes over all samples, the careful way; and,
    // for contrast, the one-pass textbook formula E[x^2] - E[x]^2.
    std::vector<double> all(shard_offset(ranks));
    for (std::size_t g = 0; g < all.size(); ++g) all[g] = sample(g);
    double sum = 0, squares = 0, deviations = 0;
    for (double x : all) {
      sum += x;
      squares += x * x;
    }
    const double serial_mean = sum / double(all.size());
    for (double x : all) deviations += (x - serial_mean) * (x - serial_mean);
    const double serial_variance = deviations / double(all.size());
    const double textbook_variance = squares / double(all.size()) - serial_mean * serial_mean;

    // Sums modulo the modulus: rank q contributes (q+1) * (i+1) * 123456789 to element i.
    constexpr std::size_t residues = 6;
    auto contribution = [&](int rank, std::size_t i) {
      return (std::uint64_t(rank) + 1) * (i + 1) * 123'456'789 % modulus;
    };
    std::vector<std::uint64_t> serial_residues(residues, 0);
    for (int q = 0; q < ranks; ++q)
      for (std::size_t i = 0; i < residues; ++i) serial_residues[i] = (serial_residues[i] + contribution(q, i)) % modulus;

    // Matrices: the product in rank order, and the reverse, to show that they differ.
    mat2 in_order = matrix_of(0), reversed = matrix_of(0);
    for (int q = 1; q < ranks; ++q) {
      in_order = mat_mul{}(in_order, matrix_of(q));
      reversed = mat_mul{}(matrix_of(q), reversed);
    }

    // 1. Each rank summarizes its shard; one all_reduce merges the summaries.
    std::vector<double> shard(shard_size(r));
    for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = sample(shard_offset(r) + i);
    const statistics global = coll::all_reduce(comm, statistics_of(shard), merge_statistics{});
    examples::expect(global.count == double(all.size()), r, "merged count is " + std::to_string(global.count));
    examples::expect(agrees(global.mean, serial_mean, 1e-12), r, "merged mean is " + std::to_string(global.mean));
    examples::expect(agrees(global.m2 / global.count, serial_variance, 1e-9), r,
           "merged variance is " + std::to_string(global.m2 / global.count) + ", serially " +
               std::to_string(serial_variance));

    // 2. A lambda with state: it captures the modulus, and the library copies the op,
    // state and all. It cannot know that the lambda is commutative, so the wrapper
    // says so; without it, this call with the ring would not compile.
    auto add_mod = coll::commutative([modulus](std::uint64_t a, std::uint64_t b) { return (a + b) % modulus; });
    std::vector<std::uint64_t> mine(residues);
    for (std::size_t i = 0; i < residues; ++i) mine[i] = contribution(r, i);
    coll::all_reduce<coll::ring>(comm, mine, add_mod);
    examples::expect(mine == serial_residues, r, "the sums modulo " + std::to_string(modulus) + " differ from the serial ones");

    // 3. Not commutative: each of these algorithms combines in rank order.
    //    coll::all_reduce<coll::ring>(comm, matrix_of(r), mat_mul{}) would not compile:
    //    the ring combines out of rank order, and a static_assert says so.
    const mat2 by_automatic = coll::all_reduce(comm, matrix_of(r), mat_mul{});
    const mat2 by_direct = coll::all_reduce<coll::direct>(comm, matrix_of(r), mat_mul{});
    const mat2 by_tree = coll::all_reduce<coll::double_binary_tree>(comm, matrix_of(r), mat_mul{});
    examples::expect(by_automatic == in_order, r, "automatic gave " + to_string(by_automatic) + ", not " + to_string(in_order));
    examples::expect(by_direct == in_order, r, "direct gave " + to_string(by_direct) + ", not " + to_string(in_order));
    examples::expect(by_tree == in_order, r, "double_binary_tree gave " + to_string(by_tree) + ", not " + to_string(in_order));
    if (!examples::prints_summary(comm)) return;

    std::cout << "custom reduce ops over " << ranks << (ranks == 1 ? " rank\n" : " ranks\n") << std::setprecision(12)
              << "  statistics of " << global.count << " samples, merged: mean " << global.mean << ", variance "
              << global.m2 / global.count << "\n    (serial two-pass: " << serial_variance
              << "; the one-pass E[x^2] - E[x]^2: " << textbook_variance << ")\n"
              << "  sums modulo " << modulus << " over the ring, with a captured modulus:";
    for (std::uint64_t v : mine) std::cout << ' ' << v;
    std::cout << "\n  matrix product in rank order: " << to_string(by_automatic)
              << " (a / c = " << double(by_automatic.a) / double(by_automatic.c) << ")\n"
              << "    in reverse order it would be " << to_string(reversed) << "\n"
              << "  automatic, direct and double_binary_tree all keep rank order; all results match on every rank\n";
  });
}
