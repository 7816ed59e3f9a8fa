// The Buffer concepts: what the collectives accept as data, and the memory space a
// buffer lives in.
#pragma once

#include <ranges>
#include <type_traits>

#include "../memory_space.hpp"

namespace collectives {

// A buffer is any contiguous sized range (std::span, std::vector, std::array, ...).
// Its memory space is host memory unless the range type says otherwise with a
// nested `memory_space` type (as device spans do).
template <class R>
concept buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

template <class R>
concept writable_buffer =
    buffer<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

template <class R>
using element_of = std::remove_cv_t<std::ranges::range_value_t<R>>;

template <class R>
struct memory_space_trait {
  using type = host_memory;
};
template <class R>
  requires requires { typename R::memory_space; }
struct memory_space_trait<R> {
  using type = typename R::memory_space;
};
template <class R>
using memory_space_of = typename memory_space_trait<std::remove_cvref_t<R>>::type;

}  // namespace collectives
