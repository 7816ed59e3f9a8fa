// gradient_bucketer: all-reduces a model's gradients while the backward pass is still
// producing them, as data-parallel training does. The gradients are registered once,
// in the order the backward pass finishes them (the last layer first, usually), and
// fall into buckets of about `bucket_bytes`, in that order. Each step, the engine
// marks a gradient ready as soon as it is final; once every gradient of a bucket is,
// the bucket is packed and its all_reduce starts, non-blocking, while the engine goes
// on computing. finish() starts what is left, waits, and unpacks the results.
//
//   coll::gradient_bucketer<coll::shm, float> bucketer(comm, {w1_grad, b1_grad, w2_grad}, coll::avg{});
//   for (each step) {
//     ... backward; after each layer: bucketer.ready(i);
//     bucketer.finish();   // every gradient now holds the average over ranks
//   }
//
// Buckets start in order on every rank, whatever order the gradients become ready in
// (a full bucket waits for the ones before it), so ranks may finish their gradients in
// different orders. A bucket of one gradient is reduced in place, without a copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "algorithm/automatic.hpp"
#include "communicator.hpp"
#include "nonblocking.hpp"
#include "ops/builtin.hpp"

namespace collectives {

template <class Transport, class T, class Op = sum, algorithm Algorithm = automatic>
class gradient_bucketer {
 public:
  static constexpr std::size_t default_bucket_bytes = std::size_t(25) << 20;  // as PyTorch's DDP

  gradient_bucketer(communicator<Transport>& comm, std::vector<std::span<T>> gradients, Op op = {},
                    std::size_t bucket_bytes = default_bucket_bytes)
      : comm_(comm), op_(op), gradients_(std::move(gradients)), bucket_of_(gradients_.size()),
        marked_(gradients_.size(), false) {
    for (std::size_t i = 0; i < gradients_.size(); ++i) {
      if (buckets_.empty() || (buckets_.back().bytes + gradients_[i].size_bytes() > bucket_bytes && !buckets_.back().members.empty()))
        buckets_.emplace_back();
      bucket& b = buckets_.back();
      b.members.push_back(i);
      b.bytes += gradients_[i].size_bytes();
      bucket_of_[i] = buckets_.size() - 1;
    }
    for (bucket& b : buckets_)
      if (b.members.size() > 1) b.packed.resize(b.bytes / sizeof(T));
  }

  std::size_t bucket_count() const noexcept { return buckets_.size(); }

  // Gradient `index` is final for this step: it is not written again before finish().
  void ready(std::size_t index) {
    if (index >= gradients_.size())
      throw std::out_of_range("gradient_bucketer::ready: gradient " + std::to_string(index) + ", but " +
                              std::to_string(gradients_.size()) + " are registered");
    if (marked_[index])
      throw std::logic_error("gradient_bucketer::ready: gradient " + std::to_string(index) +
                             " was marked ready twice in one step");
    marked_[index] = true;
    ++buckets_[bucket_of_[index]].ready;
    start_full_buckets();
    comm_.progress();  // moves the buckets already started
  }

  // Marks whatever is not marked yet ready, waits for every bucket and leaves each
  // gradient holding op over every rank's. Then the next step may begin. A failure
  // (a lost peer, a timeout) comes out of here, and leaves the step unfinished.
  void finish() {
    for (std::size_t i = 0; i < gradients_.size(); ++i)
      if (!marked_[i]) ready(i);
    for (bucket& b : buckets_) b.in_flight.wait();
    for (bucket& b : buckets_) unpack(b);
    std::fill(marked_.begin(), marked_.end(), false);
    for (bucket& b : buckets_) b.ready = 0;
    next_to_start_ = 0;
  }

 private:
  struct bucket {
    std::vector<std::size_t> members;  // gradient indices, in registration order
    std::size_t bytes = 0, ready = 0;
    std::vector<T> packed;             // empty for a bucket of one gradient: reduced in place
    call_handle<Transport> in_flight;
  };

  // Buckets start in order: a full one waits until every one before it has started.
  void start_full_buckets() {
    while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].ready == buckets_[next_to_start_].members.size()) {
      bucket& b = buckets_[next_to_start_++];
      if (b.members.size() == 1) {
        b.in_flight = iall_reduce<Algorithm>(comm_, gradients_[b.members.front()], op_);
        continue;
      }
      std::size_t at = 0;
      for (std::size_t i : b.members) {
        std::copy(gradients_[i].begin(), gradients_[i].end(), b.packed.begin() + std::ptrdiff_t(at));
        at += gradients_[i].size();
      }
      b.in_flight = iall_reduce<Algorithm>(comm_, b.packed, op_);
    }
  }

  void unpack(bucket& b) {
    if (b.members.size() == 1) return;
    std::size_t at = 0;
    for (std::size_t i : b.members) {
      std::copy_n(b.packed.begin() + std::ptrdiff_t(at), gradients_[i].size(), gradients_[i].begin());
      at += gradients_[i].size();
    }
  }

  communicator<Transport>& comm_;
  Op op_;
  std::vector<std::span<T>> gradients_;
  std::vector<std::size_t> bucket_of_;
  std::vector<bool> marked_;
  std::vector<bucket> buckets_;
  std::size_t next_to_start_ = 0;
};

}  // namespace collectives
