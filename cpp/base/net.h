// Sockets and network interfaces: the small toolbox shared by the TCP store, the connection
// manager and the tcp transport.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/config.h"
#include "uccl/status.h"

namespace uccl {

// UCCL_SOCKET_IFNAME (NCCL syntax) and UCCL_SOCKET_FAMILY ("", AF_INET, AF_INET6).
extern const TextSetting kSocketIfname, kSocketFamily;

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  int port() const;
  void set_port(int port);
  std::string to_string() const;  // "10.0.0.2:41234" or "[fd00::2]:41234"
};
// Parses "host:port", "[v6]:port" or a name (resolved with getaddrinfo).
Result<SockAddr> parse_address(const std::string& host, int port);

struct NetInterface {
  std::string name;   // "eth0"
  SockAddr addr;      // port 0
  bool loopback = false;
  bool up = false;
  bool running = false;   // IFF_RUNNING: the link is up (carrier); an up NIC without it moves nothing
  double speed_gbps = 0;  // from /sys/class/net/<if>/speed when known
  std::string network;    // the subnet, "10.210.1.0/24" (address & netmask); "" when unknown
};

// All interfaces with an IPv4/IPv6 address (link-local IPv6 skipped).
std::vector<NetInterface> list_interfaces();

// NCCL's UCCL_SOCKET_IFNAME syntax: comma-separated prefixes ("eth,ib"), "^" in front
// excludes ("^docker,lo"), "=" in front matches exact names ("=eth0").
bool ifname_matches(const std::string& spec, const std::string& ifname);

// Rails: UCCL_SOCKET_IFNAME may hold one entry per local rank, separated by ';'
// ("=eth0;=eth1": local rank i uses entry i mod 2), so that each rank of a host binds to the NIC
// of its rail instead of every rank picking the same fastest NIC. rail_ifname_spec() returns the
// entry for `local_rank` (the whole spec when it has no ';'; every entry, joined by ',', when
// the local rank is unknown, -1) and says which in *why (empty when there is no list).
// `var` names the variable in *why (UCCL_IB_HCA takes the same lists).
std::string rail_ifname_spec(const std::string& spec, int local_rank, std::string* why = nullptr,
                             const char* var = "UCCL_SOCKET_IFNAME");
// This process's rank among its host's processes, as the launcher says (LOCAL_RANK, Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, SLURM_LOCALID); -1 when none does.
int launcher_local_rank();
// How many processes of the job run on this host, as the launcher says (LOCAL_WORLD_SIZE,
// OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE); -1 when none does.
int launcher_local_size();

// The interfaces to listen on: those matching spec (or, with an empty spec, every up
// non-loopback interface except docker*, falling back to loopback when that is all there is),
// restricted to `family` ("", "AF_INET", "AF_INET6").
std::vector<NetInterface> select_interfaces(const std::string& spec, const std::string& family);

// Socket helpers. Deadlines are absolute steady-clock seconds (see now_s()).
double now_s();
Status set_nonblocking(int fd, bool on);
// TCP_NODELAY, buffer sizes, and for dead links (UCCL_TCP_DEAD_LINK_S > 0): keepalive probes
// once a second after half the bound idle (answered by the peer's kernel, however busy its
// process), retransmissions at least once a second (TCP_RTO_MAX_MS, Linux >= 6.15), and a
// 15-minute TCP_USER_TIMEOUT, so that the kernel never gives up on a lossy but live link first:
// LinkWatch (below) decides, from the kernel's own counts.
void set_socket_options(int fd);
extern const DoubleSetting kTcpDeadLinkS;  // UCCL_TCP_DEAD_LINK_S (0: the kernel's defaults)
// Listening socket on addr (port 0 = ephemeral); the bound port is written back into addr.
Result<int> listen_on(SockAddr* addr, int backlog = 128);
// Blocking connect with retries until the deadline (the listener may not exist yet).
// A refusal (ECONNREFUSED: the host answered, nothing listens there) is retried only until
// refused_until_s when that is given (>= 0): a caller that knows the listener exists learns
// quickly that its process is gone. *refused (if given) says whether the last try was refused.
Result<int> connect_to(const SockAddr& addr, double deadline_s, double refused_until_s = -1,
                       bool* refused = nullptr);
// connect_to without blocking: the same tries, retries and errors, advanced by step() from a
// progress loop (the connection manager dials a peer whose host may not answer for the whole
// window; held in one call, that would stall its engine, and every thread that needs the
// engine, for up to two seconds per socket).
class Dialer {
 public:
  enum class State { kPending, kConnected, kFailed };
  Dialer(const SockAddr& addr, double deadline_s, double refused_until_s = -1);
  ~Dialer();  // closes a socket not taken
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;
  // One look: try (again) when due, or see whether the try in flight finished. Never blocks.
  State step();
  // Blocks until the next step() may move: the socket in flight writable, or the next try due.
  void wait() const;
  int take();                  // kConnected: the (blocking) socket, now the caller's
  int fd() const { return fd_; }  // the socket of the try in flight (-1 between tries)
  const Status& error() const { return error_; }  // kFailed: why
  bool refused() const { return refused_; }  // the last try was refused (ECONNREFUSED)

 private:
  State finish(int err);  // the try in flight ended with err (0: connected)
  State fail(Status why);  // kFailed, for good
  Status timed_out() const;  // the window ended (the last error named)
  SockAddr addr_;
  double deadline_s_, refused_until_s_;
  double backoff_ = 0.005, retry_at_ = 0;
  int fd_ = -1;
  bool tried_ = false, refused_ = false;
  State state_ = State::kPending;
  Status error_;
  std::string last_error_ = "no attempt made";
};
// Dead links (UCCL_TCP_DEAD_LINK_S) on one socket: how long the peer's host has left this side
// waiting for any answer - an ACK of data in flight, or of keepalive probes on an idle socket.
// Only the kernel's answers count, so a peer slow to read (a full window: its host still
// answers) never looks dead; and as the kernel retransmits (and probes) at least once a second,
// a lossy link must lose every try of the bound in a row to look dead (a quarter of the packets
// lost each way: ~1e-7 at 20 s). Look at least every kLookS.
class LinkWatch {
 public:
  static constexpr double kLookS = 0.5;
  struct Silence {
    double seconds = 0;     // 0: the host answers (or nothing waits for an answer)
    uint32_t segments = 0;  // data segments in flight; 0 with seconds > 0: keepalive probes
    // "stopped acknowledging <what>: no ACK for 21 s with 3 segment(s) in flight", or
    // "stopped answering keepalive probes on <what>: none answered for 21 s" (what may be "").
    std::string text(const std::string& what) const;
  };
  // Data in flight: since the first look that saw no ACK (at most kLookS before it: data sent
  // after an idle spell has an old last ACK but was not waiting that long), never more than the
  // kernel's time since the last ACK. Keepalive probes out: the kernel's time since the last
  // ACK (the probes start only after an idle spell, which counts).
  Silence look(int fd);

 private:
  double since_ = -1;
};

// Blocking full send/recv bounded by a deadline; kRemoteError if the peer closed, or (with a
// watch, and UCCL_TCP_DEAD_LINK_S > 0) once the peer's host stopped acknowledging.
Status send_all(int fd, const void* buf, size_t len, double deadline_s, LinkWatch* watch = nullptr);
Status recv_all(int fd, void* buf, size_t len, double deadline_s, LinkWatch* watch = nullptr);

}  // namespace uccl
