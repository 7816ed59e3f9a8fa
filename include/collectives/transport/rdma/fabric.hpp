// The libfabric objects behind one rdma rank: the provider's description (fi_info),
// its fabric, domain, completion queue, address vector and one reliable-datagram
// endpoint (FI_EP_RDM), each closed by its owner; and the choice of provider.
//
// The endpoint asks for tagged messages and RMA reads, messages between a pair of
// ranks delivered in the order sent (FI_ORDER_SAS), and takes whichever memory
// registration modes the provider needs (FI_MR_LOCAL, FI_MR_VIRT_ADDR,
// FI_MR_PROV_KEY, FI_MR_ALLOCATED, FI_MR_ENDPOINT): registration.hpp honours each.
#pragma once

#include <dlfcn.h>
#include <signal.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../../error.hpp"

namespace collectives::rdma_detail {

// The libfabric interface version this code is written against.
inline constexpr std::uint32_t api_version = FI_VERSION(1, 9);

// A failed libfabric call, as the error every rdma start-up failure throws.
[[noreturn]] inline void fail(errc code, const std::string& what, long rc) {
  throw error(code, "rdma: " + what + ": " + fi_strerror(int(rc < 0 ? -rc : rc)) + " (" + std::to_string(rc) + ")");
}
inline void check(long rc, const char* what) {
  if (rc < 0) fail(errc::invalid_config, what, rc);
}

template <class Fid>
struct fid_closer {
  void operator()(Fid* f) const noexcept { fi_close(&f->fid); }
};
template <class Fid>
using fid_ptr = std::unique_ptr<Fid, fid_closer<Fid>>;

struct info_deleter {
  void operator()(fi_info* i) const noexcept { fi_freeinfo(i); }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

// Providers that drive network hardware; the rest (tcp, udp, sockets, shm, net, and
// the ofi_rxm/ofi_rxd layers over them) are software, which automatic_transport never
// picks by itself.
inline bool is_hardware_provider(std::string_view name) {
  for (std::string_view hw : {"verbs", "efa", "cxi", "psm3", "psm2", "opx", "usnic", "gni", "bgq"})
    if (name.find(hw) != std::string_view::npos) return true;
  return false;
}

// What this transport asks a provider for; `provider` empty means any.
inline info_ptr hints_for(const std::string& provider) {
  info_ptr hints(fi_allocinfo());
  if (!hints) throw error(errc::invalid_config, "rdma: fi_allocinfo: out of memory");
  hints->caps = FI_TAGGED | FI_RMA | FI_READ | FI_REMOTE_READ;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation's context starts with a fi_context2
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one thread drives it; abort() only wakes it
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  if (!provider.empty()) hints->fabric_attr->prov_name = ::strdup(provider.c_str());
  return hints;
}

// Debian's libfabric links libinfinipath (for its psm provider), which on loading
// takes the program's crash signals over to print a backtrace and leave a .btr file
// in the working directory. A program's crashes are its own: where that library holds
// a crash signal, it goes back to the default.
inline void give_back_crash_signals() {
  for (const int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    const auto handler = (sa.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(sa.sa_sigaction)
                                                    : reinterpret_cast<void*>(sa.sa_handler);
    Dl_info where{};
    if (handler && ::dladdr(handler, &where) != 0 && where.dli_fname &&
        std::string_view(where.dli_fname).find("infinipath") != std::string_view::npos)
      ::signal(sig, SIG_DFL);
  }
}

// Every provider description that fits, in libfabric's order of preference.
inline info_ptr matching_providers(const std::string& provider) {
  give_back_crash_signals();
  auto hints = hints_for(provider);
  fi_info* found = nullptr;
  const int rc = fi_getinfo(api_version, nullptr, nullptr, 0, hints.get(), &found);
  if (rc == -FI_ENODATA || found == nullptr) {
    if (provider.empty())
      throw error(errc::invalid_config,
                  "rdma: libfabric offers no provider with reliable datagrams, tagged messages and RMA reads "
                  "(fi_info -t FI_EP_RDM lists what this host has)");
    throw error(errc::invalid_config, "rdma: libfabric has no provider \"" + provider +
                                          "\" with reliable datagrams, tagged messages and RMA reads here "
                                          "(fi_info -l lists the providers; try tcp or shm)");
  }
  check(rc, "fi_getinfo");
  return info_ptr(found);
}

// The names of the providers that fit, hardware or not, once each.
inline std::vector<std::string> provider_names(const fi_info* list) {
  std::vector<std::string> names;
  for (const fi_info* i = list; i; i = i->next) {
    std::string n = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
    bool seen = false;
    for (const auto& m : names) seen = seen || m == n;
    if (!seen) names.push_back(std::move(n));
  }
  return names;
}

// True where libfabric offers a hardware provider this transport can use.
inline bool hardware_present() {
  try {
    const info_ptr list = matching_providers("");
    for (const auto& n : provider_names(list.get()))
      if (is_hardware_provider(n)) return true;
  } catch (const error&) {
  }
  return false;
}

inline bool is_loopback_domain(const fi_info* i) {
  return i->domain_attr->name && std::string_view(i->domain_attr->name) == "lo";
}

// The provider to use: the one named (libfabric's name, say "tcp", "tcp;ofi_rxm",
// "shm", "verbs"), else the first hardware one, else tcp. A job that spans hosts
// skips the loopback interface.
inline info_ptr choose_provider(const std::string& named, bool spans_hosts) {
  const std::string wanted = named.empty() ? std::string() : named;
  info_ptr list = matching_providers(wanted);
  const fi_info* pick = nullptr;
  auto usable = [&](const fi_info* i) { return !(spans_hosts && is_loopback_domain(i)); };
  if (wanted.empty()) {
    for (const fi_info* i = list.get(); i && !pick; i = i->next)
      if (is_hardware_provider(i->fabric_attr->prov_name) && usable(i)) pick = i;
    if (!pick) return choose_provider("tcp", spans_hosts);
  } else {
    for (const fi_info* i = list.get(); i && !pick; i = i->next)
      if (usable(i)) pick = i;
  }
  if (!pick)
    throw error(errc::invalid_config, "rdma: provider \"" + wanted + "\" offers only the loopback interface, and this job spans hosts");
  return info_ptr(fi_dupinfo(pick));
}

// One rank's endpoint and what it needs. The completion queue reports sends, receives
// and reads; it has a file descriptor to sleep on where the provider offers one.
class endpoint {
 public:
  explicit endpoint(info_ptr chosen) : info_(std::move(chosen)) {
    fid_fabric* fab = nullptr;
    check(fi_fabric(info_->fabric_attr, &fab, nullptr), "fi_fabric");
    fabric_.reset(fab);
    fid_domain* dom = nullptr;
    check(fi_domain(fabric_.get(), info_.get(), &dom, nullptr), "fi_domain");
    domain_.reset(dom);
    open_cq();
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fid_av* av = nullptr;
    check(fi_av_open(domain_.get(), &av_attr, &av, nullptr), "fi_av_open");
    av_.reset(av);
    fid_ep* ep = nullptr;
    check(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
    ep_.reset(ep);
    check(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind (address vector)");
    check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (completion queue)");
    check(fi_enable(ep_.get()), "fi_enable");
  }
  endpoint(const endpoint&) = delete;
  endpoint& operator=(const endpoint&) = delete;
  ~endpoint() {  // the endpoint before what it is bound to
    ep_.reset();
    av_.reset();
    cq_.reset();
  }

  const fi_info& info() const { return *info_; }
  std::string provider() const { return info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "?"; }
  std::string fabric_name() const { return info_->fabric_attr->name ? info_->fabric_attr->name : "?"; }
  std::string domain_name() const { return info_->domain_attr->name ? info_->domain_attr->name : "?"; }
  std::uint64_t mr_mode() const { return std::uint64_t(info_->domain_attr->mr_mode); }
  std::size_t max_message() const { return info_->ep_attr->max_msg_size; }
  std::size_t inject_bytes() const { return info_->tx_attr->inject_size; }

  fid_domain* domain() const { return domain_.get(); }
  fid_ep* ep() const { return ep_.get(); }
  fid_cq* cq() const { return cq_.get(); }
  fid_fabric* fabric() const { return fabric_.get(); }
  // Closes the endpoint: no transfer touches memory after this. The rest stays, for
  // the registrations still to be closed.
  void shut() { ep_.reset(); }

  // The completion queue's descriptor to poll(2) on, or -1 (the caller then spins).
  int wait_fd() const { return wait_fd_; }

  // This endpoint's address, for the other ranks.
  std::string name() const {
    std::string bytes(256, '\0');
    std::size_t len = bytes.size();
    check(fi_getname(&ep_->fid, bytes.data(), &len), "fi_getname");
    bytes.resize(len);
    return bytes;
  }

  // The peers' addresses, in rank order; returns their handles.
  std::vector<fi_addr_t> insert(const std::vector<std::string>& names) {
    std::vector<fi_addr_t> handles(names.size(), FI_ADDR_NOTAVAIL);
    for (std::size_t r = 0; r < names.size(); ++r) {
      const int n = fi_av_insert(av_.get(), names[r].data(), 1, &handles[r], 0, nullptr);
      if (n != 1) fail(errc::invalid_config, "fi_av_insert (rank " + std::to_string(r) + "'s address)", n < 0 ? n : -FI_EINVAL);
    }
    return handles;
  }

 private:
  void open_cq() {
    fi_cq_attr attr{};
    attr.format = FI_CQ_FORMAT_TAGGED;
    attr.size = 4096;
    attr.wait_obj = FI_WAIT_FD;
    fid_cq* cq = nullptr;
    if (fi_cq_open(domain_.get(), &attr, &cq, nullptr) == 0) {
      cq_.reset(cq);
      if (fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) wait_fd_ = -1;
      return;
    }
    attr.wait_obj = FI_WAIT_NONE;  // a provider with no descriptor to sleep on: the waits spin
    check(fi_cq_open(domain_.get(), &attr, &cq, nullptr), "fi_cq_open");
    cq_.reset(cq);
  }

  info_ptr info_;
  fid_ptr<fid_fabric> fabric_;
  fid_ptr<fid_domain> domain_;
  fid_ptr<fid_cq> cq_;
  fid_ptr<fid_av> av_;
  fid_ptr<fid_ep> ep_;
  int wait_fd_ = -1;
};

}  // namespace collectives::rdma_detail
