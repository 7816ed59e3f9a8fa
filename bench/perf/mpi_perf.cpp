// mpi_perf: the Open MPI twin of collectives_perf. Same flags, columns, JSON lines
// ("program":"openmpi") and element-by-element checks (bench/perf/harness.hpp), with
// the calls made through MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block,
// MPI_Bcast, MPI_Reduce, MPI_Alltoall, MPI_Gather and MPI_Scatter.
//
//   mpicxx -std=c++20 -O2 bench/perf/mpi_perf.cpp -o mpi_perf
//   mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp -n 2 ./mpi_perf all_reduce -b 8 -e 1M
//
// The collective is the first argument (or the program's name: mpi_all_reduce_perf).
// mpirun --mca btl picks the transport; --transport only labels the output and
// defaults to what OMPI_MCA_btl (which mpirun passes on) names.
// - avg: MPI has none; it is MPI_SUM followed by one division by P on every rank that
//   holds a result, inside the timed call, as this library's avg finishes its sum.
// - absmax: the same functor as collectives_perf's, through MPI_Op_create.
// - out-of-place broadcast: MPI_Bcast has one buffer, so the root first copies its
//   input into its output (timed with the call).
// Only MPI's C interface is used: leave out the deprecated C++ bindings, which cost
// compile time and don't build warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <span>
#include <string>
#include <string_view>

#include "harness.hpp"

namespace {

using namespace perf;

template <class T>
MPI_Datatype mpi_type() {
  switch (element_type_of<T>()) {
    case element_type::float32: return MPI_FLOAT;
    case element_type::float64: return MPI_DOUBLE;
    case element_type::int32: return MPI_INT32_T;
    case element_type::int64: return MPI_INT64_T;
    case element_type::uint8: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI's user function: inout[i] = in[i] op inout[i].
template <class T>
void absmax_on_arrays(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = absmax{}(a[i], b[i]);
}

// A count as MPI's int, or a clear error for sizes MPI's int counts can't say.
int mpi_count(std::size_t n) {
  if (n > std::size_t(INT_MAX)) {
    std::fprintf(stderr, "mpi_perf: %zu elements exceed MPI's int counts\n", n);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return int(n);
}

class mpi_backend {
 public:
  static constexpr bool reduce_scatter_in_place_result_at_own_part = false;  // MPI_IN_PLACE: at the front

  explicit mpi_backend(std::string transport) : transport_(std::move(transport)) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    std::fill(std::begin(user_ops_), std::end(user_ops_), MPI_OP_NULL);
  }
  mpi_backend(const mpi_backend&) = delete;
  mpi_backend& operator=(const mpi_backend&) = delete;
  ~mpi_backend() {
    for (MPI_Op& op : user_ops_)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
  double max_over_ranks(double v) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return v;
  }
  long long sum_over_ranks(long long v) {
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    return v;
  }

  run_description describe() const {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string detail(version, std::find(version, version + length, ','));  // "Open MPI v4.1.4"
    const char* btl = std::getenv("OMPI_MCA_btl");
    detail += std::string("; OMPI_MCA_btl=") + (btl ? btl : "(unset: Open MPI's default)");
    return {.program = "openmpi", .transport = transport_, .transport_detail = detail, .algorithm = "auto",
            .ranks = size_};
  }

  template <collective C, class T, op_kind K>
  void call(std::span<const T> input, std::span<T> output, int root) {
    const MPI_Datatype type = mpi_type<T>();
    const MPI_Comm world = MPI_COMM_WORLD;
    switch (C) {
      case collective::all_reduce:
        MPI_Allreduce(input.data(), output.data(), mpi_count(input.size()), type, op<K, T>(), world);
        finish_avg<K>(output);
        break;
      case collective::all_gather:
        MPI_Allgather(input.data(), mpi_count(input.size()), type, output.data(), mpi_count(input.size()), type, world);
        break;
      case collective::reduce_scatter:
        MPI_Reduce_scatter_block(input.data(), output.data(), mpi_count(output.size()), type, op<K, T>(), world);
        finish_avg<K>(output);
        break;
      case collective::broadcast:
        if (rank_ == root) std::copy(input.begin(), input.end(), output.begin());
        MPI_Bcast(output.data(), mpi_count(output.size()), type, root, world);
        break;
      case collective::reduce:
        MPI_Reduce(input.data(), output.data(), mpi_count(input.size()), type, op<K, T>(), root, world);
        if (rank_ == root) finish_avg<K>(output);
        break;
      case collective::all_to_all: {
        const int part = mpi_count(input.size() / std::size_t(size_));
        MPI_Alltoall(input.data(), part, type, output.data(), part, type, world);
        break;
      }
      case collective::gather:
        MPI_Gather(input.data(), mpi_count(input.size()), type, output.data(), mpi_count(input.size()), type, root, world);
        break;
      case collective::scatter:
        MPI_Scatter(input.data(), mpi_count(output.size()), type, output.data(), mpi_count(output.size()), type, root,
                    world);
        break;
    }
  }

  template <collective C, class T, op_kind K>
  void call_in_place(std::span<T> data, int root) {
    const MPI_Datatype type = mpi_type<T>();
    const MPI_Comm world = MPI_COMM_WORLD;
    const int count = mpi_count(data.size());
    const int part = mpi_count(data.size() / std::size_t(size_));
    T* const mine = data.data() + std::size_t(rank_) * std::size_t(part);
    switch (C) {
      case collective::all_reduce:
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, type, op<K, T>(), world);
        finish_avg<K>(data);
        break;
      case collective::all_gather:
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), part, type, world);
        break;
      case collective::reduce_scatter:
        MPI_Reduce_scatter_block(MPI_IN_PLACE, data.data(), part, type, op<K, T>(), world);
        finish_avg<K>(data.first(std::size_t(part)));
        break;
      case collective::broadcast: MPI_Bcast(data.data(), count, type, root, world); break;
      case collective::reduce:
        if (rank_ == root) {
          MPI_Reduce(MPI_IN_PLACE, data.data(), count, type, op<K, T>(), root, world);
          finish_avg<K>(data);
        } else {
          MPI_Reduce(data.data(), nullptr, count, type, op<K, T>(), root, world);
        }
        break;
      case collective::all_to_all:
        MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), part, type, world);
        break;
      case collective::gather:
        if (rank_ == root) MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), part, type, root, world);
        else MPI_Gather(mine, part, type, nullptr, 0, type, root, world);
        break;
      case collective::scatter:
        if (rank_ == root) MPI_Scatter(data.data(), part, type, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, world);
        else MPI_Scatter(nullptr, 0, type, mine, part, type, root, world);
        break;
    }
  }

 private:
  template <op_kind K, class T>
  MPI_Op op() {
    if constexpr (K == op_kind::sum || K == op_kind::avg) return MPI_SUM;
    else if constexpr (K == op_kind::prod) return MPI_PROD;
    else if constexpr (K == op_kind::min) return MPI_MIN;
    else if constexpr (K == op_kind::max) return MPI_MAX;
    else {
      MPI_Op& made = user_ops_[int(element_type_of<T>())];
      if (made == MPI_OP_NULL) MPI_Op_create(&absmax_on_arrays<T>, /*commute=*/1, &made);
      return made;
    }
  }

  template <op_kind K, class T>
  void finish_avg(std::span<T> result) const {
    if constexpr (K == op_kind::avg)
      for (T& x : result) x = finish<K>(x, size_);
  }

  std::string transport_;
  int rank_ = 0, size_ = 1;
  MPI_Op user_ops_[std::size(all_types)];
};

// What OMPI_MCA_btl names, as a transport label: vader (shared memory) or tcp.
std::string transport_from_environment() {
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (btl == nullptr) return "default";
  const std::string_view b = btl;
  const bool vader = b.find("vader") != b.npos || b.find("sm") != b.npos;
  const bool tcp = b.find("tcp") != b.npos;
  if (vader && !tcp) return "vader";
  if (tcp && !vader) return "tcp";
  return std::string(b);
}

int run(const options& o) {
  mpi_backend backend(o.transport.empty() ? transport_from_environment() : o.transport);
  if (has_root(o.which) && o.root >= backend.size()) {
    if (backend.rank() == 0)
      std::fprintf(stderr, "mpi_perf: -r %d is not a rank of %d\n", o.root, backend.size());
    return 2;
  }
  switch (o.which) {
    case collective::all_reduce: return run_perf<collective::all_reduce>(backend, o);
    case collective::all_gather: return run_perf<collective::all_gather>(backend, o);
    case collective::reduce_scatter: return run_perf<collective::reduce_scatter>(backend, o);
    case collective::broadcast: return run_perf<collective::broadcast>(backend, o);
    case collective::reduce: return run_perf<collective::reduce>(backend, o);
    case collective::all_to_all: return run_perf<collective::all_to_all>(backend, o);
    case collective::gather: return run_perf<collective::gather>(backend, o);
    case collective::scatter: return run_perf<collective::scatter>(backend, o);
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Flags first, so that bad ones are refused without starting MPI's machinery.
  auto which = collective_named(argv[0]);
  int first_flag = 1;
  if (!which && argc > 1 && (which = collective_named(argv[1]))) first_flag = 2;
  const parse_result parsed = parse_options(argc, argv, first_flag, program::openmpi);
  if (parsed.help) {
    print_usage(stdout, program::openmpi);
    return 0;
  }
  std::string why = !which ? (argc > 1 ? "'" + std::string(argv[1]) + "' is not a collective" : "name the collective to time")
                           : parsed.error;
  if (!why.empty()) {
    std::fprintf(stderr, "mpi_perf: %s (mpi_perf -h for help)\n", why.c_str());
    return 2;
  }
  options o = parsed.opts;
  o.which = *which;
  MPI_Init(&argc, &argv);
  const int status = run(o);
  MPI_Finalize();
  return status;
}
