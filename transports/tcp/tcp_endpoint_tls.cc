// TcpEndpoint and TLS (tcp_tls.h): the handshakes progress() drives first, and the I/O
// primitives every byte of the endpoint goes through (plain syscalls, or OpenSSL).
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include "base/log.h"
#include "base/net.h"
#include "transports/tcp/tcp_endpoint.h"

namespace uccl {
namespace tcp {

bool TcpEndpoint::drive_handshakes() {
  bool moved = false, all = true;
  for (auto& s : socks_) {
    if (s.tls_ready) continue;
    bool done = false, want_write = false;
    Status st = s.tls->handshake(&done, &want_write);
    if (!st.ok()) {
      fatal(Status(Code::kRemoteError, "encrypted connection to " + peer_.describe() + ", socket " +
                                           std::to_string(s.index) + ": " + st.message(),
                   peer_.peer_rank));
      return true;
    }
    s.tx_blocked = want_write;  // EPOLLOUT while the handshake waits for room
    update_epoll(s);
    if (done) {
      s.tls_ready = true;
      moved = true;
      UCCL_INFO("tcp socket %d to %s: %s", s.index, peer_.describe().c_str(), s.tls->describe().c_str());
    } else {
      all = false;
    }
  }
  if (all) {
    handshaking_ = false;
    return true;
  }
  if (now_s() > handshake_deadline_)
    fatal(Status(Code::kTimeout, "TLS handshake with " + peer_.describe() + " did not finish in time", peer_.peer_rank));
  return moved;
}

ssize_t TcpEndpoint::io_sendmsg(Socket& s, const iovec* iov, int niov) {
  if (!s.tls || s.tls->kernel_send()) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<size_t>(niov);
    return ::sendmsg(s.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // User-space TLS: one SSL_write per buffer. A write that would block is retried later with
  // the same bytes at the same place (the endpoint keeps its queue), as OpenSSL requires.
  ssize_t total = 0;
  for (int i = 0; i < niov; ++i) {
    if (iov[i].iov_len == 0) continue;
    const ssize_t n = s.tls->write(iov[i].iov_base, iov[i].iov_len);
    if (n < 0) return total > 0 ? total : -1;
    total += n;
    if (static_cast<size_t>(n) < iov[i].iov_len) break;
  }
  return total;
}

ssize_t TcpEndpoint::io_recv(Socket& s, void* buf, size_t n) {
  if (!s.tls || s.tls->kernel_recv()) return ::recv(s.fd, buf, n, MSG_DONTWAIT);
  return s.tls->read(buf, n);
}

ssize_t TcpEndpoint::io_readv(Socket& s, const iovec* iov, int niov) {
  if (!s.tls || s.tls->kernel_recv()) return ::readv(s.fd, iov, niov);
  // SSL_read fills one buffer: the payload's destination first (the staging buffer catches
  // the next header on a later read).
  for (int i = 0; i < niov; ++i)
    if (iov[i].iov_len > 0) return s.tls->read(iov[i].iov_base, iov[i].iov_len);
  return 0;
}

}  // namespace tcp
}  // namespace uccl
