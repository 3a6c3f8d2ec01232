// TcpEndpoint: setup, posting, the progress loop, readiness (epoll) and failure handling.
// The byte-moving halves live in tcp_endpoint_send.cc and tcp_endpoint_recv.cc.
#include "transports/tcp/tcp_endpoint.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"

namespace uccl {

const BytesSetting kTcpStripeMinBytes("tcp", "UCCL_TCP_STRIPE_MIN_BYTES", "256K",
                                      "messages at least this large are striped across the sockets of a peer",
                                      bytes_at_least(0));
const TextSetting kTcpStripe("tcp", "UCCL_TCP_STRIPE", "adaptive",
                             "how a large message is spread over a peer's sockets: adaptive (chunks go to the socket "
                             "with the least data on its way, so a slow or busy NIC carries less) or static (one part "
                             "per socket, sized by the NICs' reported rates)",
                             one_of({"adaptive", "static"}));
const BytesSetting kTcpStripeChunkBytes("tcp", "UCCL_TCP_STRIPE_CHUNK_BYTES", "256K",
                                        "adaptive striping: the chunk handed to one socket at a time",
                                        bytes_at_least(kStripeAlign));
const BytesSetting kTcpStripeInflightBytes("tcp", "UCCL_TCP_STRIPE_INFLIGHT_BYTES", "1M",
                                           "adaptive striping: a socket gets its next chunk while less than this "
                                           "(or two of its bandwidth-delay products, if more) is on its way",
                                           bytes_at_least(1));
namespace tcp {

Result<Endpoint*> TcpEndpoint::create(const PeerContext& peer, const std::vector<int>& fds, bool tls, bool server) {
  auto close_all = [&] {
    for (int fd : fds) close(fd);
  };
  if (fds.empty()) return InvalidArgument("tcp endpoint to " + peer.describe() + ": no sockets");
  for (int fd : fds) {
    Status s = set_nonblocking(fd, true);
    if (!s.ok()) {
      close_all();
      return s.with_context("tcp endpoint to " + peer.describe());
    }
    set_socket_options(fd);
  }
  int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) {
    int err = errno;
    close_all();
    return SystemError("epoll_create1", err);
  }
  auto* ep = new TcpEndpoint(peer, epfd, fds);
  if (tls) {
    for (auto& s : ep->socks_) {
      auto link = TlsLink::create(s.fd, server, peer.link_key);
      if (!link.ok()) {
        delete ep;
        return link.status().with_context("tcp endpoint to " + peer.describe());
      }
      s.tls = std::move(link.value());
      s.tls_ready = false;
    }
    ep->handshaking_ = true;
    ep->handshake_deadline_ = now_s() + (peer.timeout_s > 0 ? peer.timeout_s : kTimeoutS.get());
  }
  for (auto& s : ep->socks_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(s.index);
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, s.fd, &ev) != 0) {
      int err = errno;
      delete ep;  // closes fds and epfd
      return SystemError("epoll_ctl(ADD)", err);
    }
    s.in_epoll = true;
    s.epoll_mask = EPOLLIN;
  }
  UCCL_INFO("tcp endpoint to %s: %s", peer.describe().c_str(), ep->describe().c_str());
  return static_cast<Endpoint*>(ep);
}

TcpEndpoint::TcpEndpoint(const PeerContext& peer, int epfd, std::vector<int> fds)
    : peer_(peer),
      epfd_(epfd),
      socks_(fds.size()),
      stripe_min_(kTcpStripeMinBytes.get()),
      adaptive_(kTcpStripe.get() == "adaptive"),
      chunk_bytes_(kTcpStripeChunkBytes.get() / kStripeAlign * kStripeAlign),
      inflight_min_(kTcpStripeInflightBytes.get()),
      dead_link_s_(kTcpDeadLinkS.get()) {
  for (size_t i = 0; i < fds.size(); ++i) {
    socks_[i].fd = fds[i];
    socks_[i].index = static_cast<int>(i);
    socks_[i].stage.reset(new uint8_t[kStageBytes]);
  }
  // Socket i runs over lane i % lanes (the core dialed it so): weigh it by that lane's rate.
  const std::vector<double>& g = peer.lane_gbps;
  if (!g.empty()) {
    const std::vector<double> w = rate_weights(g);
    for (size_t i = 0; i < fds.size(); ++i) weights_.push_back(w[i % w.size()]);
    if (std::all_of(weights_.begin(), weights_.end(), [&](double w) { return w == weights_[0]; })) weights_.clear();
  }
  SockAddr a;
  a.len = sizeof a.ss;
  if (getpeername(fds[0], reinterpret_cast<sockaddr*>(&a.ss), &a.len) == 0) peer_address_ = a.to_string();
  else peer_address_ = peer.peer_address.empty() ? "?" : peer.peer_address;
}

TcpEndpoint::~TcpEndpoint() {
  // Requests still pending are alive by contract (their owner keeps them until they finish):
  // fail them rather than leave someone waiting on an endpoint that no longer exists.
  if (has_pending())
    fatal(Status(Code::kAborted, "tcp endpoint to " + peer_.describe() + " destroyed", peer_.peer_rank), false);
  for (auto& s : socks_) close(s.fd);
  close(epfd_);
}

std::string TcpEndpoint::describe() const {
  std::string s = "tcp " + peer_address_ + " (" + std::to_string(socks_.size()) + (socks_.size() == 1 ? " socket" : " sockets");
  if (!peer_.lane_names.empty()) {
    s += " striped over";
    for (size_t i = 0; i < peer_.lane_names.size(); ++i)
      s += (i ? ", " : " ") + peer_.lane_names[i] +
           (peer_.lane_gbps[i] > 0 ? " " + std::to_string(static_cast<int>(peer_.lane_gbps[i] + 0.5)) + " Gbit/s" : "");
  }
  if (socks_[0].tls) s += socks_[0].tls_ready ? ", " + socks_[0].tls->describe() : ", TLS handshake pending";
  return s + ")";
}

void TcpEndpoint::post_send(SendRequest* r) {
  r->state = ReqState::kPending;
  r->error = Status::Ok();
  if (any_eof_ && dead_.ok()) fatal(peer_gone("before a send was posted"));
  if (!dead_.ok()) {
    fail(r, dead_);
    return;
  }
  const uint64_t seq = next_send_seq_++;
  const size_t n = socks_.size(), bytes = r->bytes;
  const bool stripe = n > 1 && bytes >= stripe_min_ && bytes > kStripeAlign;
  auto part = [&](SendOp* op, size_t nparts, size_t offset, size_t len, int socket) {
    TxPart p;
    p.op = op;
    p.hdr.part_count = static_cast<uint16_t>(nparts);
    p.hdr.msg_seq = seq;
    p.hdr.env = r->env;
    p.hdr.total_bytes = bytes;
    p.hdr.part_offset = offset;
    p.hdr.part_bytes = len;
    p.data = static_cast<const uint8_t*>(r->data) + offset;
    p.done = 0;
    p.socket = socket;
    queue_part(p);
  };
  if (stripe && adaptive_) {
    // Chunks for whichever socket drains first; part_count is 16 bits on the wire.
    const size_t fewest = (bytes + UINT16_MAX - 1) / UINT16_MAX;
    const size_t chunk = std::max(chunk_bytes_, (fewest + kStripeAlign - 1) / kStripeAlign * kStripeAlign);
    const size_t nparts = (bytes + chunk - 1) / chunk;
    sends_.push_back(SendOp{r, static_cast<uint32_t>(nparts)});
    for (size_t i = 0; i < nparts; ++i) part(&sends_.back(), nparts, i * chunk, std::min(chunk, bytes - i * chunk), -1);
    feed();
    return;
  }
  if (stripe && !weights_.empty()) {
    const std::vector<StripePart> parts = weighted_parts(bytes, weights_, seq % n);
    sends_.push_back(SendOp{r, static_cast<uint32_t>(parts.size())});
    for (const StripePart& sp : parts)
      part(&sends_.back(), parts.size(), sp.offset, sp.bytes, static_cast<int>(sp.socket));
    return;
  }
  size_t chunk = bytes, nparts = 1;
  if (stripe) {
    chunk = (bytes + n - 1) / n;
    chunk = (chunk + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
    nparts = (bytes + chunk - 1) / chunk;
  }
  sends_.push_back(SendOp{r, static_cast<uint32_t>(nparts)});
  for (size_t i = 0; i < nparts; ++i)
    part(&sends_.back(), nparts, i * chunk, std::min(chunk, bytes - i * chunk), static_cast<int>((seq + i) % n));
}

void TcpEndpoint::post_recv(RecvRequest* r) {
  r->state = ReqState::kPending;
  r->error = Status::Ok();
  if (!dead_.ok()) {
    fail(r, dead_);
    return;
  }
  recvs_.push_back(RecvOp{r});
  if (r->reduce && (!dtype_valid(static_cast<int>(r->dtype)) || !redop_valid(static_cast<int>(r->op)) ||
                    r->bytes % dtype_size(r->dtype) != 0)) {
    // The sequence of receives is now unusable: failing only this one would pair the next
    // message with the wrong request.
    fatal(InvalidArgument("tcp reduce receive from " + peer_.describe() + ": " + std::to_string(r->bytes) +
                          " bytes is not a whole number of elements (or bad dtype/op)"));
  }
}

void TcpEndpoint::arm_wait(WaitSet* ws) {
  Endpoint::arm_wait(ws);                     // the sockets' epoll fd
  if (!feedq_.empty()) ws->poll_only = true;  // a socket draining below its limit signals nothing
}

void TcpEndpoint::update_epoll(Socket& s) {
  if (!s.in_epoll) return;
  uint32_t want = (s.stalled ? 0u : static_cast<uint32_t>(EPOLLIN)) | (s.tx_blocked ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == s.epoll_mask) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u32 = static_cast<uint32_t>(s.index);
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, s.fd, &ev) == 0) s.epoll_mask = want;
}

void TcpEndpoint::poll_readiness() {
  epoll_event evs[16];
  for (auto& s : socks_) s.readable = s.writable = false;
  for (;;) {
    int n = epoll_wait(epfd_, evs, 16, 0);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < n; ++i) {
      Socket& s = socks_[evs[i].data.u32];
      uint32_t e = evs[i].events;
      s.readable |= (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
      s.writable |= (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0;
      if ((e & (EPOLLHUP | EPOLLERR)) && s.stalled && !s.hup) {
        // Hung up (or reset) while we were not reading this socket: what the peer sent before
        // is still readable and is delivered once its receive is posted. Out of the epoll set,
        // so that an idle engine does not spin on the hang-up meanwhile.
        s.hup = true;
        any_eof_ = true;
        epoll_ctl(epfd_, EPOLL_CTL_DEL, s.fd, nullptr);
        s.in_epoll = false;
      }
    }
    if (n < 16) return;
  }
}

bool TcpEndpoint::progress() {
  if (!dead_.ok()) return false;
  bool moved = false;
  if (handshaking_) {
    moved = drive_handshakes();
    if (handshaking_ || !dead_.ok()) return moved;
  }
  // A receive posted since the last call may un-stall a socket.
  for (auto& s : socks_) {
    if (s.stalled && s.hdr.msg_seq < recv_base_seq_ + recvs_.size()) {
      s.stalled = false;
      update_epoll(s);
    }
  }
  poll_readiness();
  if (!feedq_.empty()) moved |= feed();
  for (auto& s : socks_) {
    if (!dead_.ok()) return true;
    if (!s.txq.empty() && (!s.tx_blocked || s.writable)) moved |= send_on(s);
  }
  for (auto& s : socks_) {
    if (!dead_.ok()) return true;
    // Work that needs no new bytes: staged data, or a header waiting to be matched/finished.
    bool buffered = !s.stalled && (s.staged() > 0 || (s.have_hdr && (!s.op || s.part_done == s.hdr.part_bytes)) ||
                                   tls_pending(s));
    if (!s.eof && (s.readable || buffered || (s.hup && !s.stalled))) moved |= recv_on(s);
  }
  if (!dead_.ok()) return true;
  moved |= complete_sends();
  moved |= complete_recvs();
  if (any_eof_) check_peer_gone();
  // Any request pending: a receiver may wait on a peer whose host stopped acknowledging what
  // this side sent earlier (sends complete once their bytes are in the kernel), or answering
  // the keepalive probes of an idle socket. (A lane may stall while another moves.)
  // The clock is read every kLinkCheckEvery calls only: on the spin path of a small operation
  // a read is a visible share of a pass.
  if (dead_link_s_ > 0 && has_pending() && dead_.ok() && ++link_check_calls_ >= kLinkCheckEvery) {
    link_check_calls_ = 0;
    const double now = now_s();
    if (now >= next_link_check_) {
      next_link_check_ = now + LinkWatch::kLookS;
      check_links();
    }
  }
  return moved;
}

std::string TcpEndpoint::lane_of(const Socket& s) const {
  if (peer_.lane_names.empty()) return "";
  return " (network " + peer_.lane_names[s.index % peer_.lane_names.size()] + ")";
}

void TcpEndpoint::check_links() {
  for (auto& s : socks_) {
    const LinkWatch::Silence quiet = s.watch.look(s.fd);
    if (quiet.seconds < dead_link_s_) continue;
    fatal(Status(Code::kRemoteError,
                 peer_.describe() + "'s host " + quiet.text("tcp socket " + std::to_string(s.index) + lane_of(s)) +
                     " (a dead link, NIC or host; UCCL_TCP_DEAD_LINK_S)",
                 peer_.peer_rank));
    return;
  }
}

Status TcpEndpoint::garbage(const Socket& s, const std::string& what) const {
  return Status(Code::kRemoteError, peer_.describe() + " sent garbage on tcp socket " + std::to_string(s.index) + " (" + what + ")",
                peer_.peer_rank);
}

void TcpEndpoint::fatal(const Status& why, bool send_abort_frame) {
  if (!dead_.ok()) return;
  dead_ = why;
  UCCL_INFO("tcp endpoint %s to %s failed: %s", describe().c_str(), peer_.describe().c_str(), why.to_string().c_str());
  if (send_abort_frame && !handshaking_) send_abort_frames(why.message());
  for (auto& op : sends_) fail(op.req, why);
  for (auto& op : recvs_) fail(op.req, why);
  sends_.clear();
  recvs_.clear();
  feedq_.clear();
  for (auto& s : socks_) {
    s.txq.clear();
    s.have_hdr = s.stalled = false;
    s.op = nullptr;
    s.stage_begin = s.stage_end = 0;
    if (s.in_epoll) epoll_ctl(epfd_, EPOLL_CTL_DEL, s.fd, nullptr);  // keep wait_fd quiet from now on
    s.in_epoll = false;
    // The write side only: the FIN follows the abort frame. A socket shut for reading resets
    // the connection when more of the peer's data arrives (RFC 1122), and a reset drops the
    // abort frame if it was still queued here (the peer's window full of our earlier parts).
    shutdown(s.fd, SHUT_WR);
  }
}

// Writes the rest of the part in flight on `s` (its bytes are still the caller's: requests
// fail only after this), waiting for room until `deadline`. The peer is receiving that part,
// so this normally takes microseconds; a peer that is gone or stuck ends it early.
bool TcpEndpoint::finish_part_in_flight(Socket& s, double deadline) {
  TxPart& p = s.txq.front();
  const size_t part_len = sizeof(PartHeader) + p.hdr.part_bytes;
  while (p.done < part_len) {
    const uint8_t* from = p.done < sizeof(PartHeader) ? reinterpret_cast<const uint8_t*>(&p.hdr) + p.done
                                                      : p.data + (p.done - sizeof(PartHeader));
    const size_t len = p.done < sizeof(PartHeader) ? sizeof(PartHeader) - p.done : part_len - p.done;
    const iovec iov{const_cast<uint8_t*>(from), len};
    const ssize_t n = io_sendmsg(s, &iov, 1);
    if (n > 0) {
      p.done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    const int ms = static_cast<int>((deadline - now_s()) * 1000);
    if (ms <= 0) return false;
    pollfd pfd{s.fd, POLLOUT, 0};
    if (::poll(&pfd, 1, ms) <= 0) return false;
  }
  return true;
}

void TcpEndpoint::send_abort_frames(const std::string& why) {
  const size_t len = std::min(why.size(), kMaxCloseNoteBytes);
  PartHeader h;
  h.flags = kPartAbort;
  h.total_bytes = h.part_bytes = len;
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
  frame.append(why, 0, len);
  // A part half written cannot be interrupted (the peer would read the frame as payload), so
  // it is finished first; a large message is striped over every socket, and a frame on none of
  // them would leave the peer with "connection reset" instead of the cause.
  const double deadline = now_s() + kAbortFrameBudgetSeconds;
  for (auto& s : socks_) {
    if (!s.txq.empty() && s.txq.front().done > 0 && !finish_part_in_flight(s, deadline)) continue;
    // Best effort: a small write into the socket buffer; a peer that is gone makes it fail.
    const iovec iov{frame.data(), frame.size()};
    (void)io_sendmsg(s, &iov, 1);
  }
}

bool TcpEndpoint::farewell_delivered() const {
  for (const auto& s : socks_) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (getsockopt(s.fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE) continue;  // reset: nothing more goes
    int unacked = 0;
    if (ioctl(s.fd, SIOCOUTQ, &unacked) == 0 && unacked > 0) return false;
  }
  return true;
}

Status TcpEndpoint::peer_gone(const std::string& detail) {
  if (!abort_note_.empty()) return peer_failed_error(peer_, abort_note_);
  std::string note;
  for (auto& s : socks_)
    if (find_abort_note(s, &note)) return peer_failed_error(peer_, note);
  return peer_closed_error(peer_, detail);
}

// Reads through the rest of the stream on `s` (what the kernel still holds), skipping the part
// being received and whole parts after it, until an abort frame. Destroys the receive state:
// only for an endpoint that is about to fail.
bool TcpEndpoint::find_abort_note(Socket& s, std::string* note) {
  constexpr size_t kChunk = 64 << 10;
  constexpr int kMaxReads = 1024;  // at most 64 MiB: more than any socket buffer holds
  std::vector<uint8_t> buf(s.stage.get() + s.stage_begin, s.stage.get() + s.stage_end);
  s.stage_begin = s.stage_end = 0;
  uint64_t skip = s.have_hdr ? s.hdr.part_bytes - s.part_done : 0;
  s.have_hdr = false;
  size_t pos = 0;
  for (int reads = 0; reads < kMaxReads;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(skip, buf.size() - pos));
    pos += n;
    skip -= n;
    if (skip == 0 && buf.size() - pos >= sizeof(PartHeader)) {
      PartHeader h;
      std::memcpy(&h, buf.data() + pos, sizeof h);
      if (h.magic != kPartMagic || h.part_bytes > (h.flags == kPartAbort ? kMaxCloseNoteBytes : h.total_bytes))
        return false;
      if (h.flags != kPartAbort) {
        pos += sizeof h;
        skip = h.part_bytes;
        continue;
      }
      if (buf.size() - pos - sizeof h >= h.part_bytes) {
        note->assign(reinterpret_cast<const char*>(buf.data() + pos + sizeof h), h.part_bytes);
        return true;
      }
    }
    buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(pos));
    pos = 0;
    const size_t old = buf.size();
    buf.resize(old + kChunk);
    ssize_t got = io_recv(s, buf.data() + old, kChunk);
    ++reads;
    if (got < 0 && errno == EINTR) got = 0;
    else if (got <= 0) return false;
    buf.resize(old + static_cast<size_t>(got));
  }
  return false;
}

}  // namespace tcp
}  // namespace uccl
