// TcpEndpoint send side: one sendmsg() gathers the headers and payloads of as many queued
// parts as fit in one iovec array, so a burst of small messages costs one syscall and a large
// message goes from the user buffer to the kernel without an intermediate copy.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

#include "transports/tcp/tcp_endpoint.h"

namespace uccl {
namespace tcp {

namespace {
constexpr int kMaxIov = 64;
constexpr int kMaxWritesPerCall = 16;  // bound the time spent on one socket per progress()
}  // namespace

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
