// TcpEndpoint send side: one sendmsg() gathers the headers and payloads of as many queued
// parts as fit in one iovec array, so a burst of small messages costs one syscall and a large
// message goes from the user buffer to the kernel without an intermediate copy.
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "transports/tcp/tcp_endpoint.h"

namespace uccl {
namespace tcp {

namespace {
constexpr int kMaxIov = 64;
constexpr int kMaxWritesPerCall = 16;  // bound the time spent on one socket per progress()
}  // namespace

void TcpEndpoint::queue_part(const TxPart& p) {
  if (feedq_.empty() && p.socket >= 0) socks_[static_cast<size_t>(p.socket)].txq.push_back(p);
  else feedq_.push_back(p);
}

size_t TcpEndpoint::committed(const Socket& s) const {
  size_t queued = 0;
  for (const TxPart& p : s.txq) queued += sizeof(PartHeader) + p.hdr.part_bytes - p.done;
  int in_kernel = 0;  // unsent and unacknowledged bytes of the socket's send buffer
  if (ioctl(s.fd, SIOCOUTQ, &in_kernel) != 0 || in_kernel < 0) in_kernel = 0;
  return queued + static_cast<size_t>(in_kernel);
}

size_t TcpEndpoint::inflight_limit(const Socket& s) const {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(s.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_delivery_rate) + sizeof ti.tcpi_delivery_rate)
    return inflight_min_;
  // Two bandwidth-delay products (bytes/s x us): what keeps the path full between our looks.
  const double bdp = static_cast<double>(ti.tcpi_delivery_rate) * ti.tcpi_min_rtt * 1e-6;
  return std::max(inflight_min_, static_cast<size_t>(2 * bdp));
}

bool TcpEndpoint::feed() {
  bool moved = false;
  bool measured = false;  // the sockets' load and limit, read once per call (two syscalls each)
  while (!feedq_.empty()) {
    TxPart& p = feedq_.front();
    size_t to = static_cast<size_t>(p.socket);
    if (p.socket < 0) {
      if (!measured) {
        feed_load_.clear();
        feed_limit_.clear();
        for (const Socket& s : socks_) {
          feed_load_.push_back(committed(s));
          feed_limit_.push_back(inflight_limit(s));
        }
        measured = true;
      }
      to = least_committed_lane(feed_load_, feed_limit_);
      if (to == SIZE_MAX) break;  // every socket holds its limit: progress() feeds again
      feed_load_[to] += sizeof(PartHeader) + p.hdr.part_bytes;
    }
    socks_[to].txq.push_back(p);
    feedq_.pop_front();
    moved = true;
  }
  return moved;
}

bool TcpEndpoint::send_on(Socket& s) {
  bool moved = false;
  s.tx_blocked = false;
  for (int round = 0; round < kMaxWritesPerCall && !s.txq.empty(); ++round) {
    iovec iov[kMaxIov];
    int niov = 0;
    size_t want = 0;
    for (auto it = s.txq.begin(); it != s.txq.end() && niov + 2 <= kMaxIov; ++it) {
      const size_t hdr = sizeof(PartHeader);
      if (it->done < hdr) {
        iov[niov++] = {reinterpret_cast<uint8_t*>(&it->hdr) + it->done, hdr - it->done};
        want += hdr - it->done;
        if (it->hdr.part_bytes) {
          iov[niov++] = {const_cast<uint8_t*>(it->data), it->hdr.part_bytes};
          want += it->hdr.part_bytes;
        }
      } else {
        size_t off = it->done - hdr;
        iov[niov++] = {const_cast<uint8_t*>(it->data) + off, it->hdr.part_bytes - off};
        want += it->hdr.part_bytes - off;
      }
    }
    ssize_t n = io_sendmsg(s, iov, niov);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s.tx_blocked = true;
        break;
      }
      fatal(peer_gone("send on socket " + std::to_string(s.index) + ": " + std::strerror(errno)));
      return true;
    }
    moved = true;
    size_t left = static_cast<size_t>(n);
    while (left > 0 && !s.txq.empty()) {
      TxPart& p = s.txq.front();
      size_t part_len = sizeof(PartHeader) + p.hdr.part_bytes;
      size_t take = std::min(left, part_len - p.done);
      p.done += take;
      left -= take;
      if (p.done < part_len) break;
      p.op->parts_left--;
      s.txq.pop_front();
    }
    if (static_cast<size_t>(n) < want) {  // the kernel buffer is full: wait for EPOLLOUT
      s.tx_blocked = true;
      break;
    }
  }
  update_epoll(s);
  return moved;
}

bool TcpEndpoint::complete_sends() {
  bool moved = false;
  while (!sends_.empty() && sends_.front().parts_left == 0) {
    SendRequest* r = sends_.front().req;
    counters_.bytes_sent += r->bytes;
    counters_.messages_sent++;
    sends_.pop_front();
    complete(r);
    moved = true;
  }
  return moved;
}

}  // namespace tcp
}  // namespace uccl
