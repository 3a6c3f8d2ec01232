// The passive side of connection setup: accepting sockets, reading and checking hellos,
// assembling a connection's sockets and handing them to the transport (see connection_manager.h).
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/net.h"
#include "core/connection_state.h"
#include "transports/registry.h"

namespace uccl {

bool ConnectionManager::accept_new() {
  bool moved = false;
  for (int lfd : listen_fds_) {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = ::accept(lfd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (fd < 0) break;
      ++sockets_accepted_;
      set_nonblocking(fd, true);
      set_socket_options(fd);
      auto in = std::make_unique<Incoming>();
      in->fd = fd;
      SockAddr a;
      std::memcpy(&a.ss, &ss, len);
      a.len = len;
      in->peer_addr = a.to_string();
      in->deadline = now_s() + accept_window_s();
      if (keyed()) {  // the connecting side proves the key over this nonce (handshake.h)
        const Greeting g = make_greeting();
        std::memcpy(in->nonce, g.nonce, kNonceBytes);
        (void)::send(fd, &g, sizeof g, MSG_DONTWAIT | MSG_NOSIGNAL);  // a fresh socket's buffer takes it
      }
      incoming_.push_back(std::move(in));
      moved = true;
    }
  }
  return moved;
}

bool ConnectionManager::progress_incoming() {
  bool moved = false;
  for (size_t i = 0; i < incoming_.size();) {
    Incoming& in = *incoming_[i];
    std::string why;
    bool probe = false;
    bool complete = false;
    bool closed_silently = false;  // closed without sending a byte
    const size_t head = sizeof(HelloHeader) + (keyed() ? kMacBytes : 0);
    for (;;) {
      size_t want;
      char* dst;
      if (in.got == sizeof(HelloHeader) && in.hello.magic == kHelloMagic && (in.hello.flags & kHelloProbe) &&
          in.hello.comm_id == comm_id_ && (keyed() || std::memcmp(in.hello.secret, secret_, kSecretBytes) == 0)) {
        probe = true;  // a peer checking that this rank is alive: nothing to log
        break;
      }
      if (in.got < sizeof(HelloHeader)) {
        want = sizeof(HelloHeader) - in.got;
        dst = reinterpret_cast<char*>(&in.hello) + in.got;
      } else if (in.got < head) {  // keyed: the hello's MAC
        if (in.hello.magic != kHelloMagic) {
          why = "bad magic (not a uccl peer)";
          break;
        }
        want = head - in.got;
        dst = reinterpret_cast<char*>(in.mac) + (in.got - sizeof(HelloHeader));
      } else {
        if (in.got == head) {
          if (keyed() && !equal_ct(hello_mac(key_, in.nonce, in.hello).data(), in.mac, kMacBytes)) {
            why = "wrong job key (the hello's MAC does not match: a stranger, or a rank with another UCCL_JOB_KEY)";
            refuse_unauthenticated(in.fd);
            break;
          }
          why = validate_hello(in.hello, keyed() ? nullptr : secret_, comm_id_, rank_, size_);
          if (!why.empty()) break;
          in.offer.resize(in.hello.offer_bytes);
        }
        size_t body = in.got - head;
        if (body == in.hello.offer_bytes) {
          complete = true;
          break;
        }
        want = in.hello.offer_bytes - body;
        dst = &in.offer[body];
      }
      ssize_t r = ::recv(in.fd, dst, want, 0);
      if (r > 0) {
        in.got += r;
        moved = true;
        continue;
      }
      if (r == 0) {
        why = "closed before finishing the handshake";
        closed_silently = in.got == 0;
      }
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) why = std::string("recv: ") + strerror(errno);
      break;
    }
    if (why.empty() && !complete && now_s() > in.deadline) why = "handshake not completed in time";
    if (!why.empty() || probe) {
      // A socket closed before its first byte is not worth a warning: a peer whose other
      // sockets of one attempt did not connect (striping falling back to one network) closes
      // those that did, before any hello.
      if (closed_silently) UCCL_INFO("a connection from %s closed before its hello", in.peer_addr.c_str());
      else if (!probe) UCCL_WARN("refused a connection from %s: %s", in.peer_addr.c_str(), why.c_str());
      ::close(in.fd);
      incoming_.erase(incoming_.begin() + i);
      moved = true;
      continue;
    }
    if (complete && in.hello.flags == kHelloFailed) {
      // The peer failed: ops that need it fail at once and say why, instead of waiting for a
      // connection that will never come (or, if it is a lower rank, probing its listener).
      const int from = in.hello.from_rank;
      if (!endpoints_[from]) fail_peer(from, peer_failed_error(peer_context(from), in.offer));
      ::close(in.fd);
      incoming_.erase(incoming_.begin() + i);
      moved = true;
      continue;
    }
    if (complete) {
      assemble(in);
      incoming_.erase(incoming_.begin() + i);
      moved = true;
      continue;
    }
    ++i;
  }
  return moved;
}

void ConnectionManager::assemble(Incoming& in) {
  const int from = in.hello.from_rank;
  const HelloHeader& h = in.hello;
  if (endpoints_[from]) {
    UCCL_WARN("refused a duplicate connection from rank %d (%s): connected already", from, in.peer_addr.c_str());
    ::close(in.fd);
    return;
  }
  auto& asmb = assembling_[from];
  if (!asmb) {
    asmb = std::make_unique<Assembling>();
    asmb->kind = static_cast<TransportKind>(h.transport);
    asmb->fds.assign(h.nchannels, -1);
    asmb->hellos.resize(h.nchannels);
    asmb->nonces.resize(h.nchannels);
    asmb->striped = (h.flags & kHelloStriped) != 0;
    asmb->deadline = now_s() + accept_window_s();
  }
  const bool fits = static_cast<TransportKind>(h.transport) == asmb->kind && h.nchannels == asmb->fds.size() &&
                    ((h.flags & kHelloStriped) != 0) == asmb->striped;
  if (!fits || asmb->fds[h.channel] >= 0) {
    UCCL_WARN("refused a connection from rank %d (%s): socket %u of %u does not fit the connection it is assembling",
              from, in.peer_addr.c_str(), h.channel, h.nchannels);
    ::close(in.fd);
    return;
  }
  asmb->hellos[h.channel] = h;
  std::memcpy(asmb->nonces[h.channel].data(), in.nonce, kNonceBytes);
  asmb->fds[h.channel] = in.fd;
  asmb->have++;
  if (h.channel == 0) asmb->offer = in.offer;
  if (asmb->have == static_cast<int>(asmb->fds.size())) finish_incoming(from);
}

bool ConnectionManager::expire_assemblies(double now) {
  bool moved = false;
  for (auto it = assembling_.begin(); it != assembling_.end();) {
    Assembling& a = *it->second;
    if (now <= a.deadline) {
      ++it;
      continue;
    }
    UCCL_WARN("dropped a connection from rank %d: %d of its %zu sockets came, the others not within %.0f s "
              "(did rank %d fail while connecting?)",
              it->first, a.have, a.fds.size(), accept_window_s(), it->first);
    for (int fd : a.fds)
      if (fd >= 0) ::close(fd);
    it = assembling_.erase(it);
    moved = true;
  }
  return moved;
}

void ConnectionManager::finish_incoming(int from) {
  std::unique_ptr<Assembling> a = std::move(assembling_[from]);
  assembling_.erase(from);
  // The peer's info is in the store already (it connected after reading it); fetch for messages.
  peer_info(from, std::min(timeout_s_, 5.0));
  PeerContext ctx = peer_context(from);
  Transport* t = transport(a->kind);
  std::string answer;
  Status err;
  Endpoint* ep = nullptr;
  if (!t) {
    err = NotSupported("transport " + std::to_string(static_cast<int>(a->kind)) + " is not built on rank " +
                       std::to_string(rank_));
  } else {
    // The ack must be on the wire before the transport's first byte, so send it first for the
    // secondary sockets, and for channel 0 right after accept() produced the answer.
    auto r = t->accept(transport_context(from, *t, a->striped), a->offer, &answer, a->fds);
    if (r.ok()) ep = r.value();
    else err = r.status();
  }
  const StagingOffer mine = staging_offer_now();
  for (size_t ch = 0; ch < a->fds.size(); ++ch) {
    const std::string& body = !err.ok() ? err.message() : (ch == 0 ? answer : std::string());
    AckHeader h{kAckMagic, err.ok() ? 0u : static_cast<uint32_t>(err.code()), static_cast<uint32_t>(body.size())};
    if (ch == 0) put_offer(&h, mine);
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    if (keyed()) msg += ack_mac(key_, a->nonces[ch].data(), a->hellos[ch], h);
    msg += body;
    Status s = send_all(a->fds[ch], msg.data(), msg.size(), now_s() + 10);
    if (!s.ok() && err.ok()) err = s.with_context("acknowledging " + ctx.describe());
  }
  if (!err.ok()) {
    if (ep) delete ep;
    else
      for (int fd : a->fds) ::close(fd);
    if (err.code() == Code::kNotSupported && ep == nullptr) {
      // A normal answer: the peer (the connecting side) tries its next transport for us.
      note_fallback(from, std::string(t ? transport_name(a->kind) : "an unknown transport") + " refused here: " +
                              err.message());
      return;
    }
    fail_peer(from, err.with_context("accepting a connection from " + ctx.describe()));
    return;
  }
  ep = wrap_staged(from, ep, mine, offer_of(a->hellos[0]));
  endpoints_[from].reset(ep);
  probes_.erase(from);  // (a probe still in flight is moot)
  UCCL_INFO("rank %d <- rank %d connected: %s", rank_, from, ep->describe().c_str());
}

}  // namespace uccl
