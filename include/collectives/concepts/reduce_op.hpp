// The ReduceOp concept: a callable that combines two values of a trivially copyable
// type into one. Requirements are tabled in docs/concepts/reduce_op.md.
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

namespace collectives {

namespace detail {
template <class Op, class T>
concept callable_on = std::invocable<Op&, const T&, const T&>;

template <class Op, class T>
concept result_converts = callable_on<Op, T> &&
                          std::convertible_to<std::invoke_result_t<Op&, const T&, const T&>, T>;
}  // namespace detail

// An op is applied element-wise: out[i] = op(a[i], b[i]). It must be associative (up
// to floating-point rounding); the library never assumes it is commutative unless
// it says so (see is_commutative).
template <class Op, class T>
concept reduce_op = std::is_trivially_copyable_v<T> && std::copy_constructible<Op> &&
                    detail::result_converts<Op, T>;

// Opt-in commutativity: an op declares `static constexpr bool commutative = true;`
// (the built-ins do), or is wrapped with collectives::commutative(f). Algorithms that
// reorder operands (ring) accept only commutative ops; the others apply the op in
// rank order: result = x0 op x1 op ... op x(P-1).
template <class Op>
inline constexpr bool is_commutative_v = [] {
  if constexpr (requires { Op::commutative; }) return bool(Op::commutative);
  else return false;
}();

// An op may finish a reduction once all ranks are combined (avg divides by the rank
// count): `T finalize(T reduced, int nranks) const`.
template <class Op, class T>
concept has_finalize = requires(const Op& op, const T& v, int n) {
  { op.finalize(v, n) } -> std::convertible_to<T>;
};

// Wraps a callable (a lambda, say) and declares it commutative.
template <class F>
struct commutative_op : F {
  static constexpr bool commutative = true;
};

template <class F>
constexpr commutative_op<std::decay_t<F>> commutative(F&& f) {
  return {std::forward<F>(f)};
}

// Names what a model of reduce_op lacks; used by every front-end call so a wrong op
// fails with one readable message instead of a template backtrace.
template <class Op, class T>
constexpr bool check_reduce_op() {
  static_assert(std::is_trivially_copyable_v<T>,
                "collectives: the element type must be trivially copyable (it travels as bytes)");
  static_assert(std::copy_constructible<Op>, "collectives: the reduce op must be copy constructible");
  static_assert(detail::callable_on<Op, T>,
                "collectives: the reduce op must be callable as op(const T&, const T&) for the element type");
  static_assert(!detail::callable_on<Op, T> || detail::result_converts<Op, T>,
                "collectives: the reduce op's result must convert to the element type");
  return reduce_op<Op, T>;
}

}  // namespace collectives
