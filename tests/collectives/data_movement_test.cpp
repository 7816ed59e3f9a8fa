// The collectives that move data without reducing it, checked against where each
// element must end up.
#include "harness.hpp"

using namespace testing;

namespace {

// Every type the data-moving collectives are checked with: the four arithmetic
// types and a user struct.
using moved_types = type_list<std::int32_t, std::int64_t, float, double, scored>;

template <class T>
T item(int rank, std::size_t i) {
  return input_value<T, coll::min>(rank, i);  // arbitrary values, distinct per rank
}

template <class T>
std::vector<T> items(int rank, std::size_t first, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = item<T>(rank, first + i);
  return v;
}

// Rank q's part (counts[q] elements) for every rank, back to back.
template <class T>
std::vector<T> every_part(const std::vector<std::size_t>& counts) {
  std::vector<T> all;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    const auto part = items<T>(int(q), 0, counts[q]);
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

template <class T>
T filler() {
  return item<T>(1000, 0);
}

template <class Kind, class F>
void grid(F&& check) {
  each_type_of([&]<class T>() {
    for (int p : rank_counts)
      for (std::size_t n : (std::is_same_v<Kind, coll::kind::broadcast> ? element_counts(p) : chunk_counts(p)))
        each_algorithm<Kind>([&]<class A>() {
          for (bool in_place : {false, true}) {
            const auto info = case_info(describe<A, T, void>(p, n, in_place));
            check.template operator()<A, T>(p, n, in_place);
          }
        });
  }, moved_types{});
}

}  // namespace

TEST_CASE("broadcast: every rank ends with the root's data") {
  grid<coll::kind::broadcast>([]<class A, class T>(int p, std::size_t n, bool in_place) {
    const int root = int(n % std::size_t(p));
    const auto want = items<T>(root, 0, n);
    on_ranks(p, [&](comm& c) {
      const bool is_root = c.rank() == root;
      auto data = is_root ? want : std::vector<T>(n, filler<T>());
      if (in_place) {
        coll::broadcast<A>(c, data, root);
        return mismatch<T>(data, want, "data");
      }
      std::vector<T> output(n, filler<T>());
      coll::broadcast<A>(c, data, output, root);
      return mismatch<T>(output, want, "output");
    });
  });
}

TEST_CASE("gather and gatherv: the root ends with every rank's part in rank order") {
  grid<coll::kind::gather>([]<class A, class T>(int p, std::size_t n, bool in_place) {
    const int root = int(n % std::size_t(p));
    for (bool uneven : {false, true}) {
      if (uneven && n > 1000) continue;
      const auto info = case_info(uneven ? "gatherv" : "gather");
      const auto counts = uneven ? uneven_counts(p, n) : std::vector<std::size_t>(std::size_t(p), n);
      const auto displ = coll::plan::displacements(counts);
      const auto want = every_part<T>(counts);
      on_ranks(p, [&](comm& c) {
        const auto r = std::size_t(c.rank());
        const auto mine = items<T>(c.rank(), 0, counts[r]);
        if (in_place) {
          std::vector<T> data(displ.back(), filler<T>());
          std::copy(mine.begin(), mine.end(), data.begin() + std::ptrdiff_t(displ[r]));
          const auto before = data;
          if (uneven) coll::gatherv<A>(c, data, counts, root);
          else coll::gather<A>(c, data, root);
          return mismatch<T>(data, c.rank() == root ? want : before, "data");
        }
        std::vector<T> output(c.rank() == root ? displ.back() : 0, filler<T>());
        if (uneven) coll::gatherv<A>(c, mine, output, counts, root);
        else coll::gather<A>(c, mine, output, root);
        return c.rank() == root ? mismatch<T>(output, want, "output") : std::string{};
      });
    }
  });
}

TEST_CASE("scatter and scatterv: rank i ends with part i of the root's data") {
  grid<coll::kind::scatter>([]<class A, class T>(int p, std::size_t n, bool in_place) {
    const int root = int(n % std::size_t(p));
    for (bool uneven : {false, true}) {
      if (uneven && n > 1000) continue;
      const auto info = case_info(uneven ? "scatterv" : "scatter");
      const auto counts = uneven ? uneven_counts(p, n) : std::vector<std::size_t>(std::size_t(p), n);
      const auto displ = coll::plan::displacements(counts);
      const auto all = items<T>(root, 0, displ.back());
      on_ranks(p, [&](comm& c) {
        const auto r = std::size_t(c.rank());
        const std::span<const T> want{all.data() + displ[r], counts[r]};
        if (in_place) {
          auto data = c.rank() == root ? all : std::vector<T>(displ.back(), filler<T>());
          auto expected = data;
          std::copy(want.begin(), want.end(), expected.begin() + std::ptrdiff_t(displ[r]));
          if (uneven) coll::scatterv<A>(c, data, counts, root);
          else coll::scatter<A>(c, data, root);
          return mismatch<T>(data, expected, "data");
        }
        const auto input = c.rank() == root ? all : std::vector<T>{};
        std::vector<T> output(counts[r], filler<T>());
        if (uneven) coll::scatterv<A>(c, input, output, counts, root);
        else coll::scatter<A>(c, input, output, root);
        return mismatch<T>(output, want, "output");
      });
    }
  });
}

TEST_CASE("all_gather and all_gatherv: every rank ends with every part in rank order") {
  grid<coll::kind::all_gather>([]<class A, class T>(int p, std::size_t n, bool in_place) {
    for (bool uneven : {false, true}) {
      if (uneven && n > 1000) continue;
      const auto info = case_info(uneven ? "all_gatherv" : "all_gather");
      const auto counts = uneven ? uneven_counts(p, n) : std::vector<std::size_t>(std::size_t(p), n);
      const auto displ = coll::plan::displacements(counts);
      const auto want = every_part<T>(counts);
      on_ranks(p, [&](comm& c) {
        const auto r = std::size_t(c.rank());
        const auto mine = items<T>(c.rank(), 0, counts[r]);
        std::vector<T> output(displ.back(), filler<T>());
        if (in_place) {
          std::copy(mine.begin(), mine.end(), output.begin() + std::ptrdiff_t(displ[r]));
          if (uneven) coll::all_gatherv<A>(c, output, counts);
          else coll::all_gather<A>(c, output);
        } else {
          if (uneven) coll::all_gatherv<A>(c, mine, output, counts);
          else coll::all_gather<A>(c, mine, output);
        }
        return mismatch<T>(output, want, "output");
      });
    }
  });
}

TEST_CASE("all_to_all and all_to_allv: part j of rank i ends as part i on rank j") {
  grid<coll::kind::all_to_all>([]<class A, class T>(int p, std::size_t n, bool in_place) {
    for (bool uneven : {false, true}) {
      if (uneven && (n > 1000 || in_place)) continue;  // all_to_allv has no in-place form
      const auto info = case_info(uneven ? "all_to_allv" : "all_to_all");
      // Rank i sends sent(i, j) elements to rank j; element k of that part is
      // item(i, j * 1'000'000 + k), so every element says where it came from.
      auto sent = [&](int i, int j) { return uneven ? (std::size_t(i + 2 * j) % 4) * n / 2 : n; };
      on_ranks(p, [&](comm& c) {
        const int r = c.rank();
        std::vector<std::size_t> send_counts, recv_counts;
        std::vector<T> input, want;
        for (int q = 0; q < p; ++q) {
          send_counts.push_back(sent(r, q));
          recv_counts.push_back(sent(q, r));
          const auto out = items<T>(r, std::size_t(q) * 1'000'000, sent(r, q));
          const auto in = items<T>(q, std::size_t(r) * 1'000'000, sent(q, r));
          input.insert(input.end(), out.begin(), out.end());
          want.insert(want.end(), in.begin(), in.end());
        }
        if (uneven) {
          std::vector<T> output(want.size(), filler<T>());
          coll::all_to_allv<A>(c, input, send_counts, output, recv_counts);
          return mismatch<T>(output, want, "output");
        }
        if (in_place) {
          coll::all_to_all<A>(c, input);
          return mismatch<T>(input, want, "data");
        }
        std::vector<T> output(want.size(), filler<T>());
        coll::all_to_all<A>(c, input, output);
        return mismatch<T>(output, want, "output");
      });
    }
  });
}

TEST_CASE("barrier: no rank leaves before every rank has arrived") {
  for (int p : rank_counts) {
    shared_counter arrived("barrier-arrivals-" + std::to_string(p));
    on_ranks(p, [&](comm& c) -> std::string {
      for (int round = 1; round <= 20; ++round) {
        if (c.rank() == round % p) std::this_thread::sleep_for(std::chrono::microseconds(200));  // a straggler
        arrived.fetch_add(1);
        coll::barrier(c);
        if (const int seen = arrived.load(); seen < round * p)
          return "left round " + std::to_string(round) + " having seen " + std::to_string(seen) + " arrivals";
        coll::barrier(c);  // nobody starts the next round before everyone checked this one
      }
      return {};
    });
  }
}
