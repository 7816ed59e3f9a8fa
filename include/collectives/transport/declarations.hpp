// The library's transports, declared without their headers, so that a program naming
// one whose header it did not include is told which header that is (by the check in
// concepts/transport.hpp) instead of meeting an unknown name. Each transport's own
// header defines it and brings what it needs (Asio, OpenSSL, the CUDA runtime).
#pragma once

namespace collectives {

class inproc;               // <collectives/transport/inproc.hpp> (in collectives.hpp)
class shm;                  // <collectives/transport/shm.hpp>
class tcp;                  // <collectives/transport/tcp.hpp>, link collectives::tcp
class automatic_transport;  // <collectives/transport/automatic.hpp>, link collectives::tcp

template <class Runtime>
class device_ipc;
namespace device {
class cuda_runtime;
}
using cuda_ipc = device_ipc<device::cuda_runtime>;  // <collectives/transport/cuda_ipc.hpp>, link collectives::cuda

}  // namespace collectives
