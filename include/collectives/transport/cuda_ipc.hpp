// CUDA IPC transport: the processes of one host move device buffers GPU to GPU. Each
// rank exports a device inbox with cudaIpcGetMemHandle; peers map it and copy into it
// with the copy engines (NVLink or PCIe peer access between devices, a device-local
// copy when ranks share a device, which this transport allows: several processes may
// share one GPU). Host messages and the protocol's notices go through shm.
//
//   #include <collectives/device/memory_ops.cuh>   // in a .cu file: device reductions
//   #include <collectives/transport/cuda_ipc.hpp>
//   auto comm = collectives::communicator<collectives::cuda_ipc>::from_env();
//   comm.transport().runtime().set_stream(stream);  // optional: the calls' stream
//   collectives::all_reduce(comm, collectives::device_span{grad, n}, collectives::sum{});
//
// Device calls are ordered after the work already on the stream and return once
// their results are in the output buffers (see docs/cuda.md).
#pragma once

#include "../device/cuda_runtime.hpp"
#include "../device_span.hpp"
#include "device_ipc.hpp"

namespace collectives {

using cuda_ipc = device_ipc<device::cuda_runtime>;

}  // namespace collectives
