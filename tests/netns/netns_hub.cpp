// A switch with netem-like impairments, in user space, for kernels without the
// netem qdisc (sch_netem): tests/netns/run.sh runs it in the hub namespace in place
// of the bridge. It takes every frame arriving on one of its ports (the hub ends of
// the hosts' veth pairs), drops it with probability --loss, holds it for --delay-ms
// plus a uniform jitter of +-jitter-ms (so frames may overtake each other, as with
// netem's jitter), and sends it out of the port that its destination MAC address was
// learned on, or out of every other port (broadcast, multicast, not yet learned).
// With --rate-mbit R each port sends at most R Mbit/s: a frame leaves once the
// frames before it on that port have had their time on the wire, as on a slower link;
// a frame that would wait there longer than 20 ms (a switch's buffer) is dropped.
//
//   netns_hub [--delay-ms D] [--jitter-ms J] [--loss P] [--rate-mbit R] [--limit N] [--seed S] PORT...
//   netns_hub --offload-off IFACE      (TSO, GSO and GRO off, run in a host's namespace)
//
// Frames carry a virtio-net header (PACKET_VNET_HDR), so checksum offload and GSO
// travel with the frame and nothing needs recomputing. --offload-off makes a host
// send single segments, so that loss hits one segment at a time rather than a whole
// 64 KiB GSO frame. Stops on SIGTERM or SIGINT and prints what it forwarded and
// dropped on stderr.

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace {

volatile sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

std::int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "netns_hub: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

struct port {
  std::string name;
  int fd = -1;
};

struct frame {
  std::int64_t due_ns;
  std::uint64_t seq;  // keeps frames with equal due times in arrival order
  int out;            // port index, or -1: every port but `in`
  int in;
  std::shared_ptr<std::vector<char>> bytes;  // virtio_net_hdr + Ethernet frame
  bool operator>(const frame& o) const { return due_ns != o.due_ns ? due_ns > o.due_ns : seq > o.seq; }
};

port open_port(const std::string& name) {
  port p{name, socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL))};
  if (p.fd < 0) die("socket(AF_PACKET)");
  const int on = 1;
  if (setsockopt(p.fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0) die("PACKET_VNET_HDR on " + name);
#ifdef PACKET_IGNORE_OUTGOING
  (void)setsockopt(p.fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on);  // also filtered below
#endif
  const int buffer = 8 << 20;
  (void)setsockopt(p.fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  (void)setsockopt(p.fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = int(if_nametoindex(name.c_str()));
  if (addr.sll_ifindex == 0) die("no interface " + name);
  if (bind(p.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) die("bind to " + name);
  return p;
}

// ethtool -K IFACE tso off gso off gro off, through the legacy ioctls.
int offload_off(const char* name) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket");
  const std::uint32_t commands[] = {ETHTOOL_STSO, ETHTOOL_SGSO, ETHTOOL_SGRO};
  const char* names[] = {"tso", "gso", "gro"};
  for (int i = 0; i < 3; ++i) {
    ethtool_value v{commands[i], 0};
    ifreq req{};
    std::snprintf(req.ifr_name, sizeof req.ifr_name, "%s", name);
    req.ifr_data = reinterpret_cast<char*>(&v);
    if (ioctl(fd, SIOCETHTOOL, &req) != 0) die(std::string("turning ") + names[i] + " off on " + name);
  }
  close(fd);
  return 0;
}

std::uint64_t mac_at(const char* p) {
  std::uint64_t m = 0;
  std::memcpy(&m, p, 6);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  double delay_ms = 0, jitter_ms = 0, loss = 0, rate_mbit = 0;
  std::size_t limit = 10000;
  std::uint64_t seed = std::random_device{}();
  std::vector<std::string> names;
  for (int a = 1; a < argc; ++a) {
    const std::string_view arg = argv[a];
    auto number = [&]() -> double {
      if (a + 1 >= argc) {
        std::fprintf(stderr, "netns_hub: %s needs a value\n", argv[a]);
        std::exit(2);
      }
      return std::strtod(argv[++a], nullptr);
    };
    if (arg == "--offload-off" && a + 1 < argc) return offload_off(argv[a + 1]);
    if (arg == "--delay-ms") delay_ms = number();
    else if (arg == "--jitter-ms") jitter_ms = number();
    else if (arg == "--loss") loss = number();
    else if (arg == "--rate-mbit") rate_mbit = number();
    else if (arg == "--limit") limit = std::size_t(number());
    else if (arg == "--seed") seed = std::uint64_t(number());
    else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr,
                   "usage: netns_hub [--delay-ms D] [--jitter-ms J] [--loss P] [--rate-mbit R] [--limit N] [--seed S] "
                   "PORT...\n");
      return 2;
    } else names.emplace_back(arg);
  }
  if (names.size() < 2 || loss < 0 || loss >= 1 || jitter_ms > delay_ms || rate_mbit < 0) {
    std::fprintf(stderr, "netns_hub: needs two ports or more, 0 <= loss < 1, jitter <= delay and rate >= 0\n");
    return 2;
  }

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<port> ports;
  for (const auto& n : names) ports.push_back(open_port(n));
  std::vector<pollfd> fds;
  for (const auto& p : ports) fds.push_back({p.fd, POLLIN, 0});

  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::priority_queue<frame, std::vector<frame>, std::greater<>> queue;
  std::unordered_map<std::uint64_t, int> learned;  // MAC address -> port
  std::uint64_t seq = 0, received = 0, lost = 0, over_limit = 0, sent = 0, send_failed = 0, bytes_sent = 0;
  const std::int64_t delay_ns = std::int64_t(delay_ms * 1e6), jitter_ns = std::int64_t(jitter_ms * 1e6);
  std::vector<std::int64_t> port_free_ns(ports.size(), 0);  // --rate-mbit: when each port's wire is free again
  std::printf("netns_hub: %zu ports, delay %.3g ms +- %.3g ms, loss %.3g%%, rate %s, seed %llu\n", ports.size(),
              delay_ms, jitter_ms, loss * 100, rate_mbit > 0 ? (std::to_string(rate_mbit) + " Mbit/s").c_str() : "unlimited",
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  constexpr std::size_t header = 10;  // struct virtio_net_hdr (<linux/virtio_net.h> is not valid C++)
  auto buffer = std::make_shared<std::vector<char>>(header + 262144);
  while (!stop_requested) {
    std::int64_t wait_ns = 50'000'000;
    if (!queue.empty()) wait_ns = std::max<std::int64_t>(0, std::min(wait_ns, queue.top().due_ns - now_ns()));
    const timespec wait{time_t(wait_ns / 1000000000), long(wait_ns % 1000000000)};
    if (ppoll(fds.data(), fds.size(), &wait, nullptr) < 0 && errno != EINTR) die("ppoll");

    for (std::size_t i = 0; i < ports.size(); ++i) {
      if (!(fds[i].revents & POLLIN)) continue;
      for (;;) {
        sockaddr_ll from{};
        socklen_t from_len = sizeof from;
        const ssize_t n = recvfrom(ports[i].fd, buffer->data(), buffer->size(), MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          die("recvfrom on " + ports[i].name);
        }
        if (from.sll_pkttype == PACKET_OUTGOING) continue;  // our own sends
        if (std::size_t(n) > buffer->size()) {
          std::fprintf(stderr, "netns_hub: a %zd-byte frame on %s does not fit; dropped\n", n, ports[i].name.c_str());
          continue;
        }
        if (std::size_t(n) < header + 14) continue;
        ++received;
        const char* eth = buffer->data() + header;
        learned[mac_at(eth + 6)] = int(i);
        if (loss > 0 && uniform(random) < loss) {
          ++lost;
          continue;
        }
        if (queue.size() >= limit) {
          ++over_limit;
          continue;
        }
        int out = -1;
        if (!(eth[0] & 1)) {  // unicast: the port it was learned on, if any
          const auto found = learned.find(mac_at(eth));
          if (found != learned.end()) out = found->second;
        }
        if (out == int(i)) continue;
        std::int64_t due = now_ns() + delay_ns;
        if (jitter_ns > 0) due += std::int64_t((uniform(random) * 2 - 1) * double(jitter_ns));
        if (rate_mbit > 0 && out >= 0) {  // after the frames ahead of it, for its own time on the wire
          auto& free_at = port_free_ns[std::size_t(out)];
          if (free_at - due > 20'000'000) {
            ++over_limit;
            continue;
          }
          due = std::max(due, free_at);
          free_at = due + std::int64_t(double(std::size_t(n) - header) * 8e3 / rate_mbit);
        }
        buffer->resize(std::size_t(n));
        queue.push({due, seq++, out, int(i), buffer});
        buffer = std::make_shared<std::vector<char>>(header + 262144);
      }
    }

    const std::int64_t now = now_ns();
    while (!queue.empty() && queue.top().due_ns <= now) {
      const frame f = queue.top();
      queue.pop();
      for (std::size_t o = 0; o < ports.size(); ++o) {
        if (f.out >= 0 ? int(o) != f.out : int(o) == f.in) continue;
        if (send(ports[o].fd, f.bytes->data(), f.bytes->size(), 0) < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != ENETDOWN && errno != ENXIO)
            die("send on " + ports[o].name);
          ++send_failed;  // a full queue or a link taken down: the frame is lost
        } else {
          ++sent;
          bytes_sent += f.bytes->size() - header;
        }
      }
    }
  }
  std::fprintf(stderr,
               "netns_hub: %llu frames in, %llu lost (%.2f%%), %llu over the limit, %llu sent (%.1f MiB), %llu "
               "failed to send\n",
               static_cast<unsigned long long>(received), static_cast<unsigned long long>(lost),
               received ? 100.0 * double(lost) / double(received) : 0.0, static_cast<unsigned long long>(over_limit),
               static_cast<unsigned long long>(sent), double(bytes_sent) / 1048576.0,
               static_cast<unsigned long long>(send_failed));
  return 0;
}
