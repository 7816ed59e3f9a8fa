// Large messages in one copy: the receiver reads them straight out of the sender's
// memory with process_vm_readv (cross-memory attach) instead of through the FIFO,
// which costs a copy on each side. The kernel allows it where the reader could ptrace
// the sender: the same user, and where Yama restricts ptrace to descendants
// (ptrace_scope 1), the sender's leave, which a rank gives as it joins when one copy is
// asked for (shm_options::limits.one_copy_bytes). A receiver
// tries once per peer, on a word the peer publishes, and tells the peer whether to send
// it large messages by address; where the kernel refuses (ptrace_scope 2 or 3, a
// seccomp filter, another pid namespace), the FIFO carries them as before.
#pragma once

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>

#include "../../config.hpp"

#if COLLECTIVES_THREAD_SANITIZER
extern "C" void __tsan_acquire(void* address);
extern "C" void __tsan_release(void* address);
#endif

namespace collectives::shm_detail {

// Ranks that are threads of one process map the segment at different addresses, so
// ThreadSanitizer cannot see the FIFO's release and acquire as one; a buffer that one
// rank reads straight out of another's memory is handed over to it explicitly. Nothing
// outside a sanitized build.
inline void hand_over(std::uint64_t buffer) {
#if COLLECTIVES_THREAD_SANITIZER
  __tsan_release(reinterpret_cast<void*>(std::uintptr_t(buffer)));
#else
  (void)buffer;
#endif
}
inline void take_over(std::uint64_t buffer) {
#if COLLECTIVES_THREAD_SANITIZER
  __tsan_acquire(reinterpret_cast<void*>(std::uintptr_t(buffer)));
#else
  (void)buffer;
#endif
}

inline constexpr std::uint64_t probe_value = 0x59504f43454e4f31ull;  // "1ONECOPY"

// The word a peer reads to learn whether it may read this process's memory.
inline std::uint64_t probe_address() {
  static const volatile std::uint64_t word = probe_value;
  return std::uint64_t(reinterpret_cast<std::uintptr_t>(&word));
}

// Gives peers of the same user leave to read this process's memory where Yama would
// otherwise allow only its ancestors (as MPI libraries' shared-memory transports do).
inline void allow_peers_to_read() {
  std::ifstream scope("/proc/sys/kernel/yama/ptrace_scope");
  int value = 0;
  if (scope >> value && value == 1) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

// Copies bytes from address `from` of process `pid` (this one: a plain copy). Returns
// the bytes copied, which may be fewer, or -1 with errno set.
inline ssize_t read_peer_memory(int pid, std::uint64_t from, std::span<std::byte> into) {
  if (into.empty()) return 0;
  if (pid == ::getpid()) {
    std::memcpy(into.data(), reinterpret_cast<const void*>(std::uintptr_t(from)), into.size());
    return ssize_t(into.size());
  }
  const iovec local{into.data(), into.size()};
  const iovec remote{reinterpret_cast<void*>(std::uintptr_t(from)), into.size()};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
}

// Empty if this process may read the memory of `pid`, whose probe word is at
// `probe`; otherwise why not.
inline std::string why_peer_unreadable(int pid, std::uint64_t probe) {
  std::uint64_t word = 0;
  const ssize_t n = read_peer_memory(pid, probe, std::as_writable_bytes(std::span(&word, 1)));
  if (n < 0) return std::string("process_vm_readv: ") + std::strerror(errno);
  if (n != ssize_t(sizeof word) || word != probe_value) return "its probe word reads wrong";
  return {};
}

}  // namespace collectives::shm_detail
