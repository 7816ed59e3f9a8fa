// The calls a user makes, instantiated: each collective, blocking and not, with every
// algorithm, on the common element types, built-in and user ops over inproc, and on
// one type and op over every other transport (every_call, at the end, says why).
// A header compiled alone instantiates few of its templates, so their warnings show only
// here; this source is compiled with the strict flags users may have (see
// tests/CMakeLists.txt) and never run.
#include <collectives/collectives.hpp>
#include <collectives/gradient_bucketer.hpp>
#include <collectives/transport/shm.hpp>
#if WITH_TCP_TRANSPORTS  // and Boost.Asio for the completion tokens
#include <collectives/completion_tokens.hpp>
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/tcp.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#endif
#if WITH_RDMA_TRANSPORT  // libfabric's headers
#include <collectives/transport/rdma.hpp>
#endif

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <future>
#include <span>
#include <type_traits>
#include <vector>

namespace coll = collectives;

namespace {

// A user type and op (as in the README): commutative, so ring takes it too.
struct scored {
  float value;
  long index;
};
struct arg_max {
  static constexpr bool commutative = true;
  scored operator()(scored a, scored b) const {
    return a.value != b.value ? (a.value > b.value ? a : b) : (a.index < b.index ? a : b);
  }
};
// Not commutative: only the algorithms that keep the rank order take it.
struct first_nonzero {
  template <class T>
  T operator()(T a, T b) const {
    return a != T{} ? a : b;
  }
};

// The reductions of one element type, algorithm and op, blocking and not.
template <class Algorithm, class Tr, class T, class Op>
void reductions(coll::communicator<Tr>& comm, Op op) {
  const auto p = static_cast<std::size_t>(comm.size());
  const std::size_t n = 8;
  std::vector<T> in(n * p), out(n * p);
  const std::vector<std::size_t> counts(p, n);
  if constexpr (coll::implements<Algorithm, coll::kind::all_reduce>) {
    coll::all_reduce<Algorithm>(comm, in, out, op);
    coll::all_reduce<Algorithm>(comm, out, op);
    const T one = coll::all_reduce<Algorithm>(comm, in[0], op);
    (void)one;
    auto h = coll::iall_reduce<Algorithm>(comm, out, op);
    h.wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::reduce>) {
    coll::reduce<Algorithm>(comm, in, out, op, 0);
    coll::reduce<Algorithm>(comm, out, op, 0);
    auto h = coll::ireduce<Algorithm>(comm, out, op, 0);
    (void)h.test();
    h.wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::reduce_scatter>) {
    coll::reduce_scatter<Algorithm>(comm, in, std::span{out}.first(n), op);
    coll::reduce_scatter<Algorithm>(comm, out, op);
    auto h = coll::ireduce_scatter<Algorithm>(comm, out, op);
    (void)h.wait_for(std::chrono::seconds(1));
  }
  if constexpr (coll::implements<Algorithm, coll::kind::reduce_scatterv>) {
    coll::reduce_scatterv<Algorithm>(comm, in, std::span{out}.first(n), std::span{counts}, op);
    coll::reduce_scatterv<Algorithm>(comm, out, std::span{counts}, op);
    auto h = coll::ireduce_scatterv<Algorithm>(comm, out, std::span<const std::size_t>{counts}, op);
    h.wait();
  }
}

// The data movement of one element type and algorithm, blocking and not.
template <class Algorithm, class Tr, class T>
void movement(coll::communicator<Tr>& comm) {
  const auto p = static_cast<std::size_t>(comm.size());
  const std::size_t n = 8;
  std::vector<T> in(n * p), out(n * p);
  const std::vector<std::size_t> counts(p, n);
  const std::span<const std::size_t> counts_span{counts};
  const std::span<const T> mine = std::span{in}.first(n);
  if constexpr (coll::implements<Algorithm, coll::kind::broadcast>) {
    coll::broadcast<Algorithm>(comm, in, out, 0);
    coll::broadcast<Algorithm>(comm, out, 0);
    coll::ibroadcast<Algorithm>(comm, out, 0).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::gather>) {
    coll::gather<Algorithm>(comm, mine, out, 0);
    coll::gather<Algorithm>(comm, out, 0);
    coll::igather<Algorithm>(comm, out, 0).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::gatherv>) {
    coll::gatherv<Algorithm>(comm, mine, out, counts_span, 0);
    coll::gatherv<Algorithm>(comm, out, counts_span, 0);
    coll::igatherv<Algorithm>(comm, out, counts_span, 0).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::scatter>) {
    coll::scatter<Algorithm>(comm, in, std::span{out}.first(n), 0);
    coll::scatter<Algorithm>(comm, out, 0);
    coll::iscatter<Algorithm>(comm, out, 0).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::scatterv>) {
    coll::scatterv<Algorithm>(comm, in, std::span{out}.first(n), counts_span, 0);
    coll::scatterv<Algorithm>(comm, out, counts_span, 0);
    coll::iscatterv<Algorithm>(comm, out, counts_span, 0).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::all_gather>) {
    coll::all_gather<Algorithm>(comm, mine, out);
    coll::all_gather<Algorithm>(comm, out);
    coll::iall_gather<Algorithm>(comm, out).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::all_gatherv>) {
    coll::all_gatherv<Algorithm>(comm, mine, out, counts_span);
    coll::all_gatherv<Algorithm>(comm, out, counts_span);
    coll::iall_gatherv<Algorithm>(comm, out, counts_span).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::all_to_all>) {
    coll::all_to_all<Algorithm>(comm, in, out);
    coll::all_to_all<Algorithm>(comm, out);
    coll::iall_to_all<Algorithm>(comm, out).wait();
  }
  if constexpr (coll::implements<Algorithm, coll::kind::all_to_allv>) {
    coll::all_to_allv<Algorithm>(comm, in, counts_span, out, counts_span);
    coll::iall_to_allv<Algorithm>(comm, in, counts_span, out, counts_span).wait();
  }
}

// Point to point and synchronisation.
template <class Tr, class T>
void point_to_point(coll::communicator<Tr>& comm) {
  std::vector<T> data(8);
  const int peer = (comm.rank() + 1) % comm.size();
  coll::send(comm, data, peer);
  coll::recv(comm, data, peer, 7u);
  auto sent = coll::isend(comm, data, peer);
  auto received = coll::irecv(comm, data, peer, 7u);
  coll::wait_all(sent, received);
  std::array<coll::call_handle<Tr>, 2> handles{coll::ibarrier(comm), coll::isend(comm, data, peer)};
  const std::span<coll::call_handle<Tr>> all{handles};
  (void)coll::wait_any(all);
  coll::wait_all(all);
}

#if WITH_TCP_TRANSPORTS
// The end of a call through Asio's completion tokens.
template <class Tr>
void completion_tokens(coll::communicator<Tr>& comm) {
  boost::asio::io_context io;
  coll::async_wait(io, coll::ibarrier(comm), [](std::exception_ptr) {});
  std::future<void> done = coll::async_wait(io, coll::ibarrier(comm), boost::asio::use_future);
  auto later = coll::async_wait(io.get_executor(), coll::ibarrier(comm), coll::deferred);
  std::move(later)([](std::exception_ptr) {});
  io.run();
  done.get();
}
#endif

template <class Algorithm, class Tr, class T>
void arithmetic(coll::communicator<Tr>& comm) {
  reductions<Algorithm, Tr, T>(comm, coll::sum{});
  reductions<Algorithm, Tr, T>(comm, coll::prod{});
  reductions<Algorithm, Tr, T>(comm, coll::min{});
  reductions<Algorithm, Tr, T>(comm, coll::max{});
  reductions<Algorithm, Tr, T>(comm, coll::avg{});
  if constexpr (std::is_integral_v<T>) {
    reductions<Algorithm, Tr, T>(comm, coll::bit_and{});
    reductions<Algorithm, Tr, T>(comm, coll::bit_or{});
    reductions<Algorithm, Tr, T>(comm, coll::bit_xor{});
  }
  movement<Algorithm, Tr, T>(comm);
}

template <class Algorithm, class Tr>
void every_type(coll::communicator<Tr>& comm) {
  arithmetic<Algorithm, Tr, float>(comm);
  arithmetic<Algorithm, Tr, double>(comm);
  arithmetic<Algorithm, Tr, int>(comm);
  arithmetic<Algorithm, Tr, std::int8_t>(comm);
  arithmetic<Algorithm, Tr, std::uint64_t>(comm);
  reductions<Algorithm, Tr, scored>(comm, arg_max{});
  const int modulus = comm.size() + 1000;  // known only at run time, as a user's would be
  reductions<Algorithm, Tr, int>(comm, coll::commutative([modulus](int a, int b) { return (a + b) % modulus; }));
  if constexpr (Algorithm::preserves_rank_order) reductions<Algorithm, Tr, double>(comm, first_nonzero{});
  movement<Algorithm, Tr, scored>(comm);
}

// Every algorithm over `comm`, each with the calls of Calls (all_types or one_type).
template <class Tr, template <class> class Calls>
void every_algorithm(coll::communicator<Tr>& comm) {
  Calls<coll::ring>::of(comm);
  Calls<coll::double_binary_tree>::of(comm);
  Calls<coll::direct>::of(comm);
  Calls<coll::halving_doubling>::of(comm);
  Calls<coll::hierarchical<>>::of(comm);
  Calls<coll::hierarchical<coll::direct, coll::double_binary_tree>>::of(comm);
  Calls<coll::automatic>::of(comm);
  auto group = comm.split(comm.rank() % 2, comm.rank());  // a group, and a group of it
  Calls<coll::automatic>::of(*group);
  auto host = group->split_by_host();
  Calls<coll::ring>::of(host);
  point_to_point<Tr, float>(comm);
  point_to_point<Tr, std::uint64_t>(comm);
  coll::barrier(comm);
  std::vector<float> weights(64), bias(8);
  coll::gradient_bucketer<Tr, float> bucketer(comm, {std::span{weights}, std::span{bias}});
  bucketer.ready(1);
  bucketer.ready(0);
  bucketer.finish();
#if WITH_TCP_TRANSPORTS
  completion_tokens(comm);
#endif
}

template <class Algorithm>
struct all_types {
  template <class Tr>
  static void of(coll::communicator<Tr>& comm) { every_type<Algorithm>(comm); }
};
// One element type and op, and the user's: what a call compiles differently for each
// transport (the communicator, its executor, the posting of bytes) is all there.
template <class Algorithm>
struct one_type {
  template <class Tr>
  static void of(coll::communicator<Tr>& comm) {
    reductions<Algorithm, Tr, float>(comm, coll::sum{});
    reductions<Algorithm, Tr, scored>(comm, arg_max{});
    movement<Algorithm, Tr, float>(comm);
  }
};

}  // namespace

// Every call, algorithm, element type and op over inproc; over the other transports
// every call and algorithm on one type and op. A warning in a call's templates comes
// from the element type, the op or the algorithm, whose code is the same over every
// transport: instantiating it again for each transport could show nothing new.
template <class Tr>
void every_call(coll::communicator<Tr>& comm) {
  if constexpr (std::is_same_v<Tr, coll::inproc>) every_algorithm<Tr, all_types>(comm);
  else every_algorithm<Tr, one_type>(comm);
}

template void every_call(coll::communicator<coll::inproc>&);
template void every_call(coll::communicator<coll::shm>&);
#if WITH_TCP_TRANSPORTS
template void every_call(coll::communicator<coll::tcp>&);
template void every_call(coll::communicator<coll::automatic_transport>&);

// How the communicators are made.
coll::communicator<coll::tcp> tcp_from_env() { return coll::communicator<coll::tcp>::from_env(); }
coll::communicator<coll::automatic_transport> automatic_from_env() {
  return coll::communicator<coll::automatic_transport>::from_env();
}
#endif
#if WITH_RDMA_TRANSPORT
template void every_call(coll::communicator<coll::rdma>&);
coll::communicator<coll::rdma> rdma_from_env() { return coll::communicator<coll::rdma>::from_env(); }
#endif
coll::communicator<coll::shm> shm_from_env() { return coll::communicator<coll::shm>::from_env(); }
void threads() {
  coll::run_ranks(2, [](coll::communicator<coll::inproc>& comm) { every_call(comm); });
}
