// The operations of process_group (process_group.hpp): each checks its tensors as torch's
// own backends do, starts the library's non-blocking calls on their memory, and hands
// the Work to the completion thread.
#include "process_group.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>

#include <ATen/core/ivalue.h>

#include <collectives/bootstrap/host_identity.hpp>
#include <collectives/bootstrap/rendezvous.hpp>
#include <collectives/collectives.hpp>
#include <collectives/element_types.hpp>
#include <collectives/nonblocking.hpp>
#include <collectives/transport/automatic.hpp>
#include <collectives/transport/shm.hpp>
#include <collectives/transport/tcp.hpp>
#include <collectives/transport/shm/segment_name.hpp>

#include "store_adapter.hpp"

namespace collectives_torch {

namespace coll = collectives;
using transport = coll::automatic_transport;
using communicator = coll::communicator<transport>;
using call = coll::call_handle<transport>;

namespace {

// ---------------------------------------------------------------------------------------
// Start-up

// The value rank `from` sets under `key`; a timeout says that rank never came.
std::string value_from(coll::bootstrap::key_value_store& store, const std::string& key, int from, int me,
                       coll::deadline until) {
  try {
    return store.get(key, until);
  } catch (const coll::error& e) {
    if (e.code() != coll::errc::timeout) throw;
    throw coll::error(coll::errc::timeout, "rank " + std::to_string(from) + " of the group did not join it within the "
                                           "timeout (rank " + std::to_string(me) + " waited for key '" + key +
                                           "' in torch's store)");
  }
}

// The job's secret: COLLECTIVES_JOB_TOKEN when the launch gives one; otherwise one that
// rank 0 draws and publishes in torch's store, which admits whoever reaches it (as
// torch's own backends trust it).
coll::auth::job_token agree_token(coll::bootstrap::key_value_store& store, const std::string& prefix, int rank,
                                  coll::deadline until) {
  if (coll::settings::text("COLLECTIVES_JOB_TOKEN")) return coll::auth::job_token::from_env(false);
  if (rank == 0) store.set(prefix + "token", coll::bootstrap::detail::fresh_secret());
  return coll::auth::job_token(value_from(store, prefix + "token", 0, rank, until));
}

bool all_on_this_host(coll::bootstrap::key_value_store& store, const std::string& prefix, int rank, int size,
                      coll::deadline until) {
  const std::string here = coll::bootstrap::host_identity();
  store.set(prefix + "host/" + std::to_string(rank), here);
  bool all_here = true;
  for (int r = 0; r < size; ++r)
    all_here = value_from(store, prefix + "host/" + std::to_string(r), r, rank, until) == here && all_here;
  return all_here;
}

transport join(const c10::intrusive_ptr<c10d::Store>& torch_store, int rank, int size, std::chrono::milliseconds timeout) {
  auto options = coll::automatic_options::from_env();
  options.shm.startup_timeout = options.tcp.startup_timeout = timeout;
  if (size == 1) return transport(coll::shm(0, 1, "", options.shm));
  c10d_store_adapter store(torch_store);
  const coll::deadline until = coll::clock::now() + timeout;
  // Every rank creates its groups in the same order, so the count names this group
  // alike on every rank, even in a store a group of the same name used before.
  const std::string prefix =
      "collectives/torch/" + std::to_string(store.add("collectives/torch/groups/" + std::to_string(rank), 1)) + "/";
  const auto token = agree_token(store, prefix, rank, until);
  const bool all_here = all_on_this_host(store, prefix, rank, size, until);
  using coll::transport_selection;
  const std::string variable(coll::transport_selection_variable);
  switch (options.selection) {
    case transport_selection::rdma:
      throw coll::error(coll::errc::invalid_config,
                        variable + "=rdma: the torch backend joins over shm or tcp; use auto, shm or tcp");
    case transport_selection::shm:
      if (!all_here)
        throw coll::error(coll::errc::invalid_config,
                          variable + "=shm, but the group's ranks are not all on this host; use tcp or auto");
      break;
    case transport_selection::tcp: return transport(coll::tcp(rank, size, store, token, options.tcp));
    case transport_selection::automatic:
      if (!all_here) return transport(coll::tcp(rank, size, store, token, options.tcp));
      break;
  }
  if (rank == 0) {
    const std::string segment = coll::shm_detail::segment_prefix(token.secret()) +
                                coll::bootstrap::detail::fresh_secret().substr(0, 16);
    store.set(prefix + "segment", segment);
  }
  return transport(coll::shm(rank, size, value_from(store, prefix + "segment", 0, rank, until), options.shm));
}

// ---------------------------------------------------------------------------------------
// Tensors

void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), "collectives: ", op, " takes CPU tensors (this build has no device support), not ",
              t.device().str());
  TORCH_CHECK(t.layout() == c10::kStrided, "collectives: ", op, " takes dense tensors, not ", t.layout());
  TORCH_CHECK(t.is_contiguous(), "collectives: ", op, " takes contiguous tensors; call .contiguous() first");
}

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "collectives: ", op, " takes one tensor per process, not ", tensors.size());
  check_tensor(tensors[0], op);
  return tensors[0];
}

// `tensors`, one per rank of `size`, each like `like` (dtype and element count).
void check_per_rank(const std::vector<at::Tensor>& tensors, const at::Tensor& like, int size, const char* op) {
  TORCH_CHECK(static_cast<int>(tensors.size()) == size, "collectives: ", op, " takes a list of ", size,
              " tensors (one per rank), not ", tensors.size());
  for (const auto& t : tensors) {
    check_tensor(t, op);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "collectives: ", op, ": a tensor of ", t.scalar_type(),
                " among tensors of ", like.scalar_type());
    TORCH_CHECK(t.numel() == like.numel(), "collectives: ", op, ": a tensor of ", t.numel(), " elements where ",
                like.numel(), " were expected");
  }
}

// The list only the root gives, of one tensor per rank (gather's outputs, scatter's inputs).
void check_root_list(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, bool is_root, int size,
                     const char* op, const char* which) {
  if (!is_root) {
    TORCH_CHECK(lists.empty(), "collectives: ", op, " takes no ", which, " tensors on a rank other than the root");
    return;
  }
  TORCH_CHECK(lists.size() == 1, "collectives: ", op, " takes one list of ", which, " tensors at the root, not ",
              lists.size());
  check_per_rank(lists[0], like, size, op);
}

void check_same_type(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "collectives: ", op, ": the input is ", b.scalar_type(),
              " and the output ", a.scalar_type());
}

int checked_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "collectives: ", op, ": root ", root, " is not a rank of a group of ", size);
  return static_cast<int>(root);
}

std::span<std::byte> bytes_of(const at::Tensor& t) { return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()}; }

template <class T>
std::span<T> elements_of(const at::Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

// The tensors back to back in one new tensor (of their common dtype).
at::Tensor flattened(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies the parts of `flat` into `tensors`, in order.
void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  int64_t at = 0;
  for (auto& t : tensors) {
    t.view({-1}).copy_(flat.narrow(0, at, t.numel()));
    at += t.numel();
  }
}

// Calls f(std::type_identity<T>{}) with the element type of torch's `type`: the same
// bits (bf16 and fp16 are the layouts of torch's BFloat16 and Half).
template <class F>
void with_element_type(at::ScalarType type, const char* op, F&& f) {
  switch (type) {
    case at::kFloat: return f(std::type_identity<float>{});
    case at::kDouble: return f(std::type_identity<double>{});
    case at::kHalf: return f(std::type_identity<coll::fp16>{});
    case at::kBFloat16: return f(std::type_identity<coll::bf16>{});
    case at::kChar: return f(std::type_identity<std::int8_t>{});
    case at::kByte: return f(std::type_identity<std::uint8_t>{});
    case at::kShort: return f(std::type_identity<std::int16_t>{});
    case at::kInt: return f(std::type_identity<std::int32_t>{});
    case at::kLong: return f(std::type_identity<std::int64_t>{});
    case at::kBool: return f(std::type_identity<bool>{});
    default: TORCH_CHECK(false, "collectives: ", op, " does not reduce tensors of ", type);
  }
}

template <class F>
void with_reduce_op(const c10d::ReduceOp& op, const char* name, F&& f) {
  switch (op) {
    case c10d::ReduceOp::SUM: return f(coll::sum{});
    case c10d::ReduceOp::AVG: return f(coll::avg{});
    case c10d::ReduceOp::PRODUCT: return f(coll::prod{});
    case c10d::ReduceOp::MIN: return f(coll::min{});
    case c10d::ReduceOp::MAX: return f(coll::max{});
    case c10d::ReduceOp::BAND: return f(coll::bit_and{});
    case c10d::ReduceOp::BOR: return f(coll::bit_or{});
    case c10d::ReduceOp::BXOR: return f(coll::bit_xor{});
    default: TORCH_CHECK(false, "collectives: ", name, " does not take ReduceOp ", static_cast<int>(op));
  }
}

const char* op_name(const c10d::ReduceOp& op) {
  static constexpr const char* names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  return op < std::size(names) ? names[op] : "UNUSED";
}

// Calls f(span of T, op) for the element type of `t` and torch's op, where the op is
// defined on that type (bitwise ops on integers and bool; AVG not on bool).
template <class F>
void with_reduction(const at::Tensor& t, const c10d::ReduceOp& reduce_op, const char* name, F&& f) {
  with_element_type(t.scalar_type(), name, [&]<class T>(std::type_identity<T>) {
    with_reduce_op(reduce_op, name, [&]<class Op>(Op op) {
      if constexpr (std::is_invocable_r_v<T, const Op&, const T&, const T&> &&
                    !(std::is_same_v<T, bool> && std::is_same_v<Op, coll::avg>))
        f(elements_of<T>(t), op);
      else
        TORCH_CHECK(false, "collectives: ", name, ": ReduceOp ", op_name(reduce_op), " is not defined on ",
                    t.scalar_type(), " tensors");
    });
  });
}

// ---------------------------------------------------------------------------------------
// Work

// One operation in flight: the library's calls it started, the buffers they use, and
// what remains once they are done (copying a flat buffer out). Whichever thread sees
// the calls end first completes it: a thread in wait(), or the completion thread.
class work final : public c10d::Work {
 public:
  work(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Waits on the calls themselves, which wakes with the progress thread's rounds,
  // instead of for the completion thread to notice.
  bool wait(std::chrono::milliseconds timeout) override {
    if (!isCompleted()) {
      const auto until = coll::clock::now() + timeout;
      for (auto& c : calls) {
        bool ended = true;
        try {
          if (timeout == kNoTimeout)
            c.wait();
          else
            ended = c.wait_until(until);
        } catch (...) {  // the call failed: complete() reports it
        }
        TORCH_CHECK(ended, "collectives: the operation did not end within ", timeout.count(), " ms");
      }
      if (claim()) complete();
    }
    return Work::wait(timeout);  // rethrows a failure
  }

  std::vector<call> calls;          // kept until the work goes: another thread may be waiting on them
  std::vector<at::Tensor> buffers;  // flat copies the calls read or write
  std::function<void()> then;

  // Whether every call has ended, done or failed; moves nothing.
  bool calls_ended() const {
    return std::all_of(calls.begin(), calls.end(), [](const call& c) { return c.finished(); });
  }
  // True for the one thread that is to complete the work.
  bool claim() noexcept { return !claimed_.exchange(true); }
  // Once the calls have ended: the last step, then the Work and its future complete.
  void complete() noexcept {
    std::exception_ptr failure;
    try {
      for (auto& c : calls) c.wait();  // throws a call's failure
      if (then) then();
    } catch (...) {
      failure = std::current_exception();
    }
    buffers.clear();
    then = nullptr;
    finish(failure);
    if (failure)
      future_->setError(failure);
    else
      future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> claimed_{false};
};

// A thread that completes works as their calls end (in any order), so that a Work's
// future completes with no one waiting: the communicator's progress thread moves the
// calls, and this one looks now and then, in pauses that grow as the progress
// thread's do, so that neither spins beside the computation the calls overlap.
class completions {
 public:
  completions() : thread_([this] { run(); }) {}
  ~completions() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_one();
    thread_.join();  // after the last work: each call ends by its deadline
  }
  void add(c10::intrusive_ptr<work> w) {
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(w));
    }
    changed_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (int idle = 0;;) {
      changed_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) return;
      std::vector<c10::intrusive_ptr<work>> looking(pending_.begin(), pending_.end());
      lock.unlock();
      std::vector<work*> ended;
      for (auto& w : looking)
        if (w->calls_ended()) {
          if (w->claim()) w->complete();
          ended.push_back(w.get());
        }
      lock.lock();
      std::erase_if(pending_, [&](const auto& w) { return std::find(ended.begin(), ended.end(), w.get()) != ended.end(); });
      idle = ended.empty() ? idle + 1 : 0;
      // A few quick looks, then pauses of 6 µs growing to 100 µs.
      if (idle > 16) changed_.wait_for(lock, std::chrono::microseconds(100 >> (4 - std::min(idle - 17, 4))));
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<c10::intrusive_ptr<work>> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

struct process_group::state {
  communicator comm;
  std::mutex starting;  // the calls start in one order on every rank, from one thread at a time
  completions completed;  // after comm: destroyed first, once the calls have ended

  state(transport t, std::chrono::milliseconds timeout) : comm(std::move(t), timeout) { comm.start_progress_thread(); }

  // Starts one operation: `start` checks nothing (the caller has), makes the library's
  // calls into the work, and says what is left for after them.
  template <class Start>
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, std::vector<at::Tensor> outputs,
                                        std::chrono::milliseconds op_timeout, Start&& start) {
    auto w = c10::make_intrusive<work>(comm.rank(), type, std::move(outputs));
    {
      std::lock_guard lock(starting);
      coll::scoped_timeout timeout(comm, op_timeout == c10d::kUnsetTimeout ? comm.timeout() : op_timeout);
      start(*w);
    }
    completed.add(w);
    return w;
  }
};

process_group::process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size), state_(std::make_unique<state>(join(store, rank, size, timeout), timeout)) {}

process_group::~process_group() = default;

std::string process_group::transport_name() const { return std::string(state_->comm.transport().name()); }

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  auto& t = single(tensors, "broadcast");
  const int root = checked_root(opts.rootRank, size_, "broadcast");
  return state_->launch(c10d::OpType::BROADCAST, tensors, opts.timeout, [&](work& w) {
    w.calls.push_back(coll::ibroadcast(state_->comm, bytes_of(t), root));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  auto& t = single(tensors, "allreduce");
  return state_->launch(c10d::OpType::ALLREDUCE, tensors, opts.timeout, [&](work& w) {
    with_reduction(t, opts.reduceOp, "allreduce",
                   [&](auto data, auto op) { w.calls.push_back(coll::iall_reduce(state_->comm, data, op)); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "collectives: allreduce_coalesced takes at least one tensor");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    check_same_type(t, tensors.front(), "allreduce_coalesced");
  }
  return state_->launch(c10d::OpType::ALLREDUCE_COALESCED, tensors, opts.timeout, [&](work& w) {
    auto flat = flattened(tensors);
    with_reduction(flat, opts.reduceOp, "allreduce_coalesced",
                   [&](auto data, auto op) { w.calls.push_back(coll::iall_reduce(state_->comm, data, op)); });
    w.then = [flat, tensors]() mutable { unflatten(flat, tensors); };
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  auto& t = single(tensors, "reduce");
  const int root = checked_root(opts.rootRank, size_, "reduce");
  return state_->launch(c10d::OpType::REDUCE, tensors, opts.timeout, [&](work& w) {
    with_reduction(t, opts.reduceOp, "reduce",
                   [&](auto data, auto op) { w.calls.push_back(coll::ireduce(state_->comm, data, op, root)); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  auto& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "collectives: allgather takes one list of output tensors per process, not ",
              outputs.size());
  check_per_rank(outputs[0], in, size_, "allgather");
  return state_->launch(c10d::OpType::ALLGATHER, outputs[0], opts.timeout, [&](work& w) {
    auto flat = at::empty({size_ * in.numel()}, in.options());
    w.calls.push_back(coll::iall_gather(state_->comm, bytes_of(in), bytes_of(flat)));
    w.then = [flat, out = outputs[0]]() mutable { unflatten(flat, out); };
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  check_same_type(output, input, "_allgather_base");
  TORCH_CHECK(output.numel() == size_ * input.numel(), "collectives: _allgather_base: the output holds ", output.numel(),
              " elements, not the group's size times the input's, ", size_ * input.numel());
  return state_->launch(c10d::OpType::_ALLGATHER_BASE, {output}, opts.timeout, [&](work& w) {
    w.calls.push_back(coll::iall_gather(state_->comm, bytes_of(input), bytes_of(output)));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  auto& in = single(inputs, "gather");
  const int root = checked_root(opts.rootRank, size_, "gather");
  const bool is_root = rank_ == root;
  check_root_list(outputs, in, is_root, size_, "gather", "output");
  return state_->launch(c10d::OpType::GATHER, is_root ? outputs[0] : std::vector<at::Tensor>{}, opts.timeout,
                        [&](work& w) {
                          auto flat = at::empty({is_root ? size_ * in.numel() : 0}, in.options());
                          w.calls.push_back(coll::igather(state_->comm, bytes_of(in), bytes_of(flat), root));
                          if (is_root) w.then = [flat, out = outputs[0]]() mutable { unflatten(flat, out); };
                        });
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  auto& out = single(outputs, "scatter");
  const int root = checked_root(opts.rootRank, size_, "scatter");
  const bool is_root = rank_ == root;
  check_root_list(inputs, out, is_root, size_, "scatter", "input");
  return state_->launch(c10d::OpType::SCATTER, outputs, opts.timeout, [&](work& w) {
    auto flat = is_root ? flattened(inputs[0]) : at::empty({0}, out.options());
    w.buffers.push_back(flat);
    w.calls.push_back(coll::iscatter(state_->comm, bytes_of(flat), bytes_of(out), root));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  auto& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "collectives: reduce_scatter takes one list of input tensors per process, not ",
              inputs.size());
  check_per_rank(inputs[0], out, size_, "reduce_scatter");
  return state_->launch(c10d::OpType::REDUCE_SCATTER, outputs, opts.timeout, [&](work& w) {
    auto flat = flattened(inputs[0]);
    w.buffers.push_back(flat);
    with_reduction(out, opts.reduceOp, "reduce_scatter", [&]<class T>(std::span<T> result, auto op) {
      w.calls.push_back(coll::ireduce_scatter(state_->comm, std::span<const T>(elements_of<T>(flat)), result, op));
    });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  check_same_type(output, input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == size_ * output.numel(), "collectives: _reduce_scatter_base: the input holds ",
              input.numel(), " elements, not the group's size times the output's, ", size_ * output.numel());
  return state_->launch(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, opts.timeout, [&](work& w) {
    with_reduction(output, opts.reduceOp, "_reduce_scatter_base", [&]<class T>(std::span<T> result, auto op) {
      w.calls.push_back(coll::ireduce_scatter(state_->comm, std::span<const T>(elements_of<T>(input)), result, op));
    });
  });
}

namespace {

// Bytes per rank from torch's splits (rows of dim 0), or an even split when none are given.
std::vector<std::size_t> byte_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int size, const char* op,
                                     const char* which) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const std::size_t row_bytes = rows == 0 ? 0 : t.nbytes() / static_cast<std::size_t>(rows);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "collectives: ", op, ": the ", which, "'s ", rows,
                " rows do not split evenly over ", size, " ranks; give split sizes");
    return std::vector<std::size_t>(static_cast<std::size_t>(size), static_cast<std::size_t>(rows / size) * row_bytes);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "collectives: ", op, ": ", splits.size(), " ", which,
              " split sizes for a group of ", size);
  TORCH_CHECK(std::all_of(splits.begin(), splits.end(), [](int64_t s) { return s >= 0; }), "collectives: ", op,
              ": a negative ", which, " split size");
  TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows, "collectives: ", op, ": the ", which,
              " split sizes add up to ", std::accumulate(splits.begin(), splits.end(), int64_t{0}), ", not its ", rows,
              " rows");
  std::vector<std::size_t> counts;
  for (const int64_t s : splits) counts.push_back(static_cast<std::size_t>(s) * row_bytes);
  return counts;
}

std::vector<std::size_t> byte_counts(const std::vector<at::Tensor>& tensors) {
  std::vector<std::size_t> counts;
  for (const auto& t : tensors) counts.push_back(t.nbytes());
  return counts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  check_same_type(output, input, "alltoall_base");
  const auto send_counts = byte_counts(input, input_splits, size_, "alltoall_base", "input");
  const auto recv_counts = byte_counts(output, output_splits, size_, "alltoall_base", "output");
  return state_->launch(c10d::OpType::ALLTOALL_BASE, {output}, opts.timeout, [&](work& w) {
    w.calls.push_back(coll::iall_to_allv(state_->comm, std::span<const std::byte>(bytes_of(input)),
                                         std::span<const std::size_t>(send_counts), bytes_of(output),
                                         std::span<const std::size_t>(recv_counts)));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "collectives: alltoall takes lists of ", size_, " tensors (one per rank), not ", inputs.size(), " and ",
              outputs.size());
  for (const auto* list : {&inputs, &outputs})
    for (const auto& t : *list) {
      check_tensor(t, "alltoall");
      check_same_type(t, inputs.front(), "alltoall");
    }
  const auto send_counts = byte_counts(inputs), recv_counts = byte_counts(outputs);
  return state_->launch(c10d::OpType::ALLTOALL, outputs, opts.timeout, [&](work& w) {
    auto flat_in = flattened(inputs);
    auto flat_out = at::empty({std::accumulate(outputs.begin(), outputs.end(), int64_t{0},
                                               [](int64_t n, const at::Tensor& t) { return n + t.numel(); })},
                              inputs.front().options());
    w.buffers.push_back(flat_in);
    w.calls.push_back(coll::iall_to_allv(state_->comm, std::span<const std::byte>(bytes_of(flat_in)),
                                         std::span<const std::size_t>(send_counts), bytes_of(flat_out),
                                         std::span<const std::size_t>(recv_counts)));
    w.then = [flat_out, outputs]() mutable { unflatten(flat_out, outputs); };
  });
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions& opts) {
  return state_->launch(c10d::OpType::BARRIER, {}, opts.timeout,
                        [&](work& w) { w.calls.push_back(coll::ibarrier(state_->comm)); });
}

namespace {
std::uint32_t checked_tag(int tag, const char* op) {
  TORCH_CHECK(tag >= 0, "collectives: ", op, ": tag ", tag, " is negative");
  return static_cast<std::uint32_t>(tag);
}
}  // namespace

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  auto& t = single(tensors, "send");
  const int peer = checked_root(dst, size_, "send");
  const auto message_tag = checked_tag(tag, "send");
  return state_->launch(c10d::OpType::SEND, tensors, c10d::kUnsetTimeout, [&](work& w) {
    w.calls.push_back(coll::isend(state_->comm, std::span<const std::byte>(bytes_of(t)), peer, message_tag));
  });
}

c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  auto& t = single(tensors, "recv");
  const int peer = checked_root(src, size_, "recv");
  const auto message_tag = checked_tag(tag, "recv");
  return state_->launch(c10d::OpType::RECV, tensors, c10d::kUnsetTimeout, [&](work& w) {
    w.calls.push_back(coll::irecv(state_->comm, bytes_of(t), peer, message_tag));
  });
}

}  // namespace collectives_torch
