// Addresses and sockets (see net.h); the network interfaces are net_interfaces.cc.
//
// Why blocking helpers with deadlines instead of plain blocking calls: bootstrap code (store,
// connection setup) must never hang on a dead peer. Every helper here polls with the time left
// until an absolute deadline, so a caller states once how long the whole exchange may take.
#include "base/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "base/config.h"
#include "base/log.h"

namespace uccl {

// ---- addresses -------------------------------------------------------------------------------

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void SockAddr::set_port(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<uint16_t>(port));
}

std::string SockAddr::to_string() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(port());
  }
  return "<unknown address family " + std::to_string(family()) + ">";
}

namespace {

bool parse_port(const std::string& s, int* port) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  *port = std::atoi(s.c_str());
  return *port <= 65535;
}

// Splits "host:port" / "[v6]:port" / "[v6]" / "v6" / "host" into host and (optional) port.
Status split_host_port(const std::string& text, std::string* host, int* port) {
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) return InvalidArgument("bad address '" + text + "': missing ']'");
    *host = text.substr(1, close - 1);
    std::string rest = text.substr(close + 1);
    if (rest.empty()) return Status::Ok();
    if (rest[0] != ':' || !parse_port(rest.substr(1), port))
      return InvalidArgument("bad address '" + text + "': bad port");
    return Status::Ok();
  }
  size_t colon = text.find(':');
  if (colon != std::string::npos && text.find(':', colon + 1) == std::string::npos) {
    *host = text.substr(0, colon);  // exactly one ':' => host:port (two or more => bare IPv6)
    if (!parse_port(text.substr(colon + 1), port)) return InvalidArgument("bad address '" + text + "': bad port");
    return Status::Ok();
  }
  *host = text;
  return Status::Ok();
}

}  // namespace

Result<SockAddr> parse_address(const std::string& text, int port) {
  std::string host;
  UCCL_RETURN_IF_ERROR(split_host_port(text, &host, &port));
  if (port < 0 || port > 65535) return InvalidArgument("port " + std::to_string(port) + " out of range");
  SockAddr out;
  if (host.empty() || host == "*") host = "0.0.0.0";
  // Numeric forms first: no resolver round trip, and scoped v6 ("fe80::1%eth0") via getaddrinfo.
  auto* a4 = reinterpret_cast<sockaddr_in*>(&out.ss);
  if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    out.len = sizeof(sockaddr_in);
    out.set_port(port);
    return out;
  }
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&out.ss);
  if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    out.len = sizeof(sockaddr_in6);
    out.set_port(port);
    return out;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  const std::string& fam = kSocketFamily.get();
  hints.ai_family = fam == "AF_INET" ? AF_INET : fam == "AF_INET6" ? AF_INET6 : AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return InvalidArgument("cannot resolve host '" + host + "': " + gai_strerror(rc));
  // Prefer IPv4 when a name has both: "localhost" often lists ::1 first, while listeners
  // bound to 0.0.0.0 (the common default) only accept IPv4.
  const addrinfo* pick = nullptr;
  for (const addrinfo* p = res; p; p = p->ai_next)
    if (p->ai_family == AF_INET && !pick) pick = p;
  for (const addrinfo* p = res; p && !pick; p = p->ai_next)
    if (p->ai_family == AF_INET6) pick = p;
  if (!pick) {
    freeaddrinfo(res);
    return InvalidArgument("host '" + host + "' has no IPv4/IPv6 address");
  }
  std::memcpy(&out.ss, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  freeaddrinfo(res);
  out.set_port(port);
  return out;
}

// ---- socket helpers --------------------------------------------------------------------------

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

Status set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return SystemError("fcntl(F_GETFL)", errno);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return SystemError("fcntl(F_SETFL)", errno);
  return Status::Ok();
}

namespace {

long read_sysctl_long(const char* path) {
  std::ifstream f(path);
  long v = -1;
  if (f) f >> v;
  return v;
}

// Time left until the deadline as a poll() timeout in milliseconds (rounded up, >= 0).
int poll_ms_left(double deadline_s) {
  double left = deadline_s - now_s();
  if (left <= 0) return 0;
  return left > 1e6 ? 1000000000 : static_cast<int>(std::ceil(left * 1000));
}

std::string peer_name(int fd) {
  SockAddr a;
  a.len = sizeof a.ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) return "peer";
  return a.to_string();
}

}  // namespace

const DoubleSetting kTcpDeadLinkS("tcp", "UCCL_TCP_DEAD_LINK_S", "20",
                                  "a dead link, NIC or host fails a tcp connection within this long, naming the network, "
                                  "instead of at the operation's timeout: data in flight with no acknowledgement at all, "
                                  "or unanswered keepalive probes (a peer slow to read still answers both; an overloaded "
                                  "host may pause its ACKs for a second or two, so keep it well above that); also how long a "
                                  "connect may go unanswered (lost SYNs are retried) before its peer counts as unreachable, "
                                  "for connections and shrink's agreement; 0: off (the communicator's timeout)",
                                  number_at_least(0));

namespace {
constexpr int kTcpRtoMaxMs = 44;  // TCP_RTO_MAX_MS (linux/tcp.h of 6.15; older headers lack it)
}  // namespace

void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Large buffers keep a fast or long link busy. But an explicit SO_SNDBUF/SO_RCVBUF turns
  // off the kernel's autotuning and is silently capped by net.core.{w,r}mem_max (often only
  // 208 KiB), which would be far worse than autotuning (tcp_rmem max is usually 6 MiB).
  // So we only pin the size when the cap allows it.
  static const int kBuf = 4 << 20;
  static const bool pin_snd = read_sysctl_long("/proc/sys/net/core/wmem_max") >= kBuf;
  static const bool pin_rcv = read_sysctl_long("/proc/sys/net/core/rmem_max") >= kBuf;
  if (pin_snd) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kBuf, sizeof kBuf);
  if (pin_rcv) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kBuf, sizeof kBuf);
  // Keepalive catches a peer host that vanished without a FIN/RST (power loss, cable, a dead
  // link) while nothing is in flight: idle for half the bound, then a probe every second.
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const double bound = kTcpDeadLinkS.get();
  if (bound <= 0) return;
  // (No TCP_KEEPCNT: with the user timeout below the kernel ignores it.)
  const int idle = std::max(1, static_cast<int>(bound / 2 + 0.5)), intvl = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  // Retransmit at least once a second while data goes unacknowledged (older kernels refuse the
  // option and keep their 120 s cap): with the exponential backoff a lossy link (a quarter of
  // the packets lost each way, on the testbed) went 20 s without an answered retransmission
  // after only 7 tries, and crawled. The cap also shrinks the kernel's own give-up time
  // (tcp_retries2 is counted in modelled backoff: ~14 s at a 1 s cap), which killed a live
  // transfer on that link after 41 s (ETIMEDOUT) - hence the user timeout, the kernel's usual
  // ~15 minutes. It also takes over keepalive's verdict (no answer for that long): the dead-link
  // bound is LinkWatch's, which sees the unanswered probes.
  const int rto_max_ms = 1000;
  const unsigned user_timeout_ms = 15 * 60 * 1000;
  setsockopt(fd, IPPROTO_TCP, kTcpRtoMaxMs, &rto_max_ms, sizeof rto_max_ms);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

Result<int> listen_on(SockAddr* addr, int backlog) {
  int fd = socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return SystemError("socket() for listening on " + addr->to_string(), errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  set_socket_options(fd);  // inherited by accepted sockets (buffer sizes must precede the SYN)
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr->ss), addr->len) != 0) {
    int err = errno;
    close(fd);
    return SystemError("bind " + addr->to_string(), err);
  }
  if (listen(fd, backlog) != 0) {
    int err = errno;
    close(fd);
    return SystemError("listen on " + addr->to_string(), err);
  }
  SockAddr bound;
  bound.len = sizeof bound.ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound.ss), &bound.len) == 0) addr->set_port(bound.port());
  return fd;
}

Dialer::Dialer(const SockAddr& addr, double deadline_s, double refused_until_s)
    : addr_(addr), deadline_s_(deadline_s), refused_until_s_(refused_until_s) {}

Dialer::~Dialer() {
  if (fd_ >= 0) close(fd_);
}

int Dialer::take() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

Dialer::State Dialer::step() {
  if (state_ != State::kPending) return state_;
  const double now = now_s();
  if (fd_ < 0) {
    if (now < retry_at_) return state_;
    if (tried_ && now >= deadline_s_) {
      return fail(timed_out());
    }
    tried_ = true;
    fd_ = socket(addr_.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) {
      return fail(SystemError("socket() for connecting to " + addr_.to_string(), errno));
    }
    set_socket_options(fd_);
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&addr_.ss), addr_.len) == 0) return finish(0);
    return errno == EINPROGRESS ? state_ : finish(errno);
  }
  pollfd p{fd_, POLLOUT, 0};
  const int rc = poll(&p, 1, 0);
  if (rc < 0) return errno == EINTR ? state_ : finish(errno);
  if (rc == 0) return now >= deadline_s_ ? finish(ETIMEDOUT) : state_;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return finish(err);
}

Dialer::State Dialer::finish(int err) {
  if (err == 0) {
    // Connecting to an unused ephemeral port on loopback can "succeed" by TCP simultaneous
    // open with ourselves; that socket would talk to nobody.
    SockAddr local, peer;
    local.len = peer.len = sizeof local.ss;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&local.ss), &local.len) == 0 &&
        getpeername(fd_, reinterpret_cast<sockaddr*>(&peer.ss), &peer.len) == 0 && local.len == peer.len &&
        std::memcmp(&local.ss, &peer.ss, local.len) == 0) {
      err = ECONNREFUSED;
    }
  }
  if (err == 0) {
    refused_ = false;
    error_ = set_nonblocking(fd_, false);
    state_ = error_.ok() ? State::kConnected : State::kFailed;
    return state_;
  }
  close(fd_);
  fd_ = -1;
  last_error_ = std::strerror(err);
  refused_ = err == ECONNREFUSED;
  // Transient: the listener is not there yet, or its backlog overflowed.
  const bool retry = err == ECONNREFUSED || err == ECONNRESET || err == ECONNABORTED || err == ETIMEDOUT ||
                     err == EINTR || err == EAGAIN;
  if (!retry) {
    return fail(Status(Code::kSystemError, "connect to " + addr_.to_string() + ": " + last_error_));
  }
  const double now = now_s();
  const bool short_window = err == ECONNREFUSED && refused_until_s_ >= 0;
  const double left = (short_window ? std::min(deadline_s_, refused_until_s_) : deadline_s_) - now;
  if (left <= 0) return fail(timed_out());
  retry_at_ = now + std::min(backoff_, left);
  backoff_ = std::min(backoff_ * 2, 0.1);
  return state_;
}

Status Dialer::timed_out() const {
  return Status(Code::kTimeout, "connect to " + addr_.to_string() + " timed out (last error: " + last_error_ + ")");
}

Dialer::State Dialer::fail(Status why) {
  state_ = State::kFailed;
  error_ = std::move(why);
  return state_;
}

void Dialer::wait() const {
  if (state_ != State::kPending) return;
  if (fd_ >= 0) {
    pollfd p{fd_, POLLOUT, 0};
    poll(&p, 1, poll_ms_left(deadline_s_));
  } else {
    const double left = retry_at_ - now_s();
    if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double>(left));
  }
}

Result<int> connect_to(const SockAddr& addr, double deadline_s, double refused_until_s, bool* refused) {
  Dialer d(addr, deadline_s, refused_until_s);
  Dialer::State st;
  while ((st = d.step()) == Dialer::State::kPending) d.wait();
  if (refused) *refused = d.refused();
  if (st == Dialer::State::kFailed) return d.error();
  return d.take();
}

LinkWatch::Silence LinkWatch::look(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  Silence s;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return s;
  const double last_ack = ti.tcpi_last_ack_recv / 1000.0;
  if (ti.tcpi_unacked > 0 && last_ack >= kLookS) {
    const double now = now_s();
    if (since_ < 0) since_ = now - kLookS;
    // Never longer than the kernel's own count since the last ACK: looks may be far apart (the
    // caller busy elsewhere), and an ACK between two of them ends the silence.
    s.seconds = std::min(now - since_, last_ack);
    s.segments = ti.tcpi_unacked;
    return s;
  }
  since_ = -1;
  if (ti.tcpi_unacked == 0 && ti.tcpi_probes > 0) s.seconds = last_ack;  // keepalive probes unanswered
  return s;
}

std::string LinkWatch::Silence::text(const std::string& what) const {
  const std::string secs = std::to_string(static_cast<int>(seconds + 0.5));
  const std::string on = what.empty() ? "" : " " + what;
  if (segments > 0)
    return "stopped acknowledging" + on + ": no ACK for " + secs + " s with " + std::to_string(segments) +
           " segment(s) in flight";
  return "stopped answering keepalive probes" + (what.empty() ? "" : " on" + on) + ": none answered for " + secs + " s";
}

namespace {
// Waits for `events` on fd until the deadline; with a watch, in steps of LinkWatch::kLookS, and
// fails once the peer's host stopped acknowledging. what(): the operation, for an error only.
template <class What>
Status wait_ready(int fd, short events, double deadline_s, LinkWatch* watch, What what) {
  const double bound = watch ? kTcpDeadLinkS.get() : 0;
  for (;;) {
    int ms = poll_ms_left(deadline_s);
    if (bound > 0) ms = std::min(ms, static_cast<int>(LinkWatch::kLookS * 1000));
    pollfd pfd{fd, events, 0};
    int rc = poll(&pfd, 1, ms);
    if (rc < 0 && errno != EINTR) return SystemError("poll", errno);
    if (rc != 0) return Status::Ok();  // ready (or a signal: the caller tries again)
    const LinkWatch::Silence quiet = bound > 0 ? watch->look(fd) : LinkWatch::Silence{};
    if (bound > 0 && quiet.seconds >= bound)
      return Status(Code::kRemoteError, what() + ": " + peer_name(fd) + "'s host " + quiet.text("") +
                                            " (a dead link, NIC or host; UCCL_TCP_DEAD_LINK_S)");
    if (poll_ms_left(deadline_s) == 0) return Status(Code::kTimeout, what() + " timed out");
  }
}
}  // namespace

Status send_all(int fd, const void* buf, size_t len, double deadline_s, LinkWatch* watch) {
  const char* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    int err = n < 0 ? errno : EAGAIN;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      return Status(Code::kRemoteError, "send to " + peer_name(fd) + " failed after " + std::to_string(done) + " of " +
                                            std::to_string(len) + " bytes: " + std::strerror(err));
    }
    Status st = wait_ready(fd, POLLOUT, deadline_s, watch, [&] {
      return "send of " + std::to_string(len) + " bytes to " + peer_name(fd) + " (" + std::to_string(done) + " sent)";
    });
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status recv_all(int fd, void* buf, size_t len, double deadline_s, LinkWatch* watch) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0)
      return Status(Code::kRemoteError, peer_name(fd) + " closed the connection after " + std::to_string(done) +
                                            " of " + std::to_string(len) + " expected bytes");
    int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK)
      return Status(Code::kRemoteError, "recv from " + peer_name(fd) + " failed: " + std::strerror(err));
    Status st = wait_ready(fd, POLLIN, deadline_s, watch, [&] {
      return "recv of " + std::to_string(len) + " bytes from " + peer_name(fd) + " (" + std::to_string(done) + " received)";
    });
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace uccl
