// Failures around connections: a failing rank's record in the store and its notices to peers
// it has no connection with, probing a lower rank that never connects, and the first error per
// peer (see connection_manager.h for why each exists).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "base/net.h"
#include "core/connection_state.h"

namespace uccl {

void ConnectionManager::probe_lower_rank(int peer) {
  const double now = now_s();
  ProbeState& st = probes_[peer];
  if (st.dialer) return advance_probe(peer, st);
  if (st.waiting_since == 0) st.waiting_since = now;
  if (now - st.waiting_since < 1.0 || now - st.last_probe < 1.0 || assembling_.count(peer)) return;
  st.last_probe = now;
  auto info = peer_info(peer, 0.05);
  if (!info.ok()) {
    if (info.status().code() != Code::kTimeout)  // the store itself is gone (it lived in a dead rank)
      fail_peer(peer, info.status().with_context("waiting for rank " + std::to_string(peer) + " to connect"));
    return;
  }
  st.listen = info.value()->listen;
  st.next = 0;
  st.all_refused = true;
  advance_probe(peer, st);
}

void ConnectionManager::advance_probe(int peer, ProbeState& st) {
  for (;;) {
    if (!st.dialer) {
      if (st.next >= st.listen.size()) break;
      auto addr = parse_address(st.listen[st.next++], 0);
      if (!addr.ok()) continue;
      st.dialer = std::make_unique<Dialer>(addr.value(), now_s() + 0.3);
    }
    const Dialer::State state = st.dialer->step();
    if (state == Dialer::State::kPending) return;
    if (state == Dialer::State::kConnected) {
      const int fd = st.dialer->take();
      st.dialer.reset();
      unanswered_since_[peer] = 0;
      const HelloHeader h = hello_to(peer, kHelloProbe);
      send_all(fd, &h, sizeof h, now_s() + 0.3);
      ::close(fd);
      return;  // alive: it just has not reached this operation yet
    }
    st.all_refused = st.all_refused && st.dialer->refused();
    st.dialer.reset();
  }
  if (st.all_refused) {
    fail_peer(peer, Status(Code::kRemoteError,
                           peer_context(peer).describe() + " is not listening any more (it exited before connecting)",
                           peer));
  } else if (unanswered_too_long(peer)) {  // no answer at all: a lost SYN, or a dead link
    fail_peer(peer, Status(Code::kRemoteError, peer_context(peer).describe() + "'s host " + no_answer_text(peer), peer));
  }
}

bool ConnectionManager::unanswered_too_long(int peer) {
  double& since = unanswered_since_[peer];
  const double now = now_s();
  if (since == 0) since = now;
  const double bound = kTcpDeadLinkS.get() > 0 ? kTcpDeadLinkS.get() : timeout_s_;
  return now - since >= bound;
}

std::string ConnectionManager::no_answer_text(int peer) const {
  const double s = unanswered_since_[peer] > 0 ? now_s() - unanswered_since_[peer] : 0;
  return "has not answered a connect for " + std::to_string(static_cast<int>(s + 0.5)) +
         " s (a dead link, NIC or host; UCCL_TCP_DEAD_LINK_S)";
}

void ConnectionManager::open_agreement_listener() {
  // On the first interface that took a data listener: the survivors of a failure reach each
  // other here (core/agreement.h), so it outlives close_all().
  auto first = parse_address(me_.listen[0], 0);
  if (!first.ok()) return;
  SockAddr a = first.value();
  a.set_port(0);
  auto fd = listen_on(&a);
  if (!fd.ok()) {
    UCCL_WARN("no agreement listener (shrink will not reach this rank): %s", fd.status().message().c_str());
    return;
  }
  agree_fd_ = fd.value();
  me_.agree = a.to_string();
  agree_ip_ = me_.agree.substr(0, me_.agree.rfind(':'));
  if (!agree_ip_.empty() && agree_ip_.front() == '[') agree_ip_ = agree_ip_.substr(1, agree_ip_.size() - 2);
}

Status ConnectionManager::store_error(const Status& s) {
  if (s.code() == Code::kTimeout || store_rank_ < 0 || store_rank_ == rank_ || store_rank_ >= size_) return s;
  return Status(Code::kRemoteError, s.message() + " (the store is served by " + peer_context(store_rank_).describe() +
                                        ", which is gone)", store_rank_);
}

void ConnectionManager::fail_peer(int peer, const Status& s) {
  if (!peer_errors_[peer].ok()) return;  // the first error is the one that says why
  UCCL_WARN("connection to rank %d failed: %s", peer, s.message().c_str());
  peer_errors_[peer] = s;
}

void ConnectionManager::publish_failure(const std::string& why) {
  Status s = store_->set("uccl/failed/" + std::to_string(rank_), why);
  if (!s.ok()) UCCL_WARN("could not publish the failure cause: %s", s.message().c_str());
}

std::string ConnectionManager::peer_failure(int peer, double timeout_s) {
  auto r = store_->get("uccl/failed/" + std::to_string(peer), timeout_s);
  return r.ok() ? r.value() : std::string();
}

void ConnectionManager::notify_failure(const std::string& why) {
  const double deadline = now_s() + 0.5;
  // In a large job each failing rank would otherwise connect to every other rank, and the
  // cascade multiplies that; the nearest ranks are the ring and tree neighbours that wait.
  constexpr int kMaxNotices = 64;
  int sent = 0;
  std::vector<bool> tried(size_, false);
  tried[rank_] = true;
  for (int d = 1; d < size_ && sent < kMaxNotices && now_s() < deadline; ++d) {
    const int peer = d % 2 ? (rank_ + (d + 1) / 2) % size_ : (rank_ - d / 2 + size_) % size_;  // +1, -1, +2, -2, ...
    if (tried[peer]) continue;
    tried[peer] = true;
    if (endpoints_[peer] || !peer_errors_[peer].ok()) continue;  // they learn through the connection
    Status s = send_failure_notice(peer, why, deadline);
    if (s.ok()) ++sent;
    else UCCL_INFO("no failure notice to rank %d: %s", peer, s.message().c_str());
  }
}

Status ConnectionManager::send_failure_notice(int peer, const std::string& why, double deadline) {
  auto info = peer_info(peer, 0.05);  // cached, or a short lookup: the store may be gone
  if (!info.ok()) return info.status();
  const uint32_t len = static_cast<uint32_t>(std::min<size_t>(why.size(), kMaxNoticeBytes));
  HelloHeader h = hello_to(peer, kHelloFailed);
  h.nchannels = 1;
  h.offer_bytes = len;
  auto fd = connect_listener(*info.value(), 0.1, deadline);
  if (!fd.ok()) return fd.status();
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  Status s;
  if (keyed()) {  // the notice fails a peer: it is authenticated like any hello
    Greeting g{};
    s = recv_all(fd.value(), &g, sizeof g, std::min(deadline, now_s() + 0.1));
    if (s.ok() && !validate_greeting(g).empty()) s = Status(Code::kRemoteError, validate_greeting(g));
    if (s.ok()) msg += hello_mac(key_, g.nonce, h);
  }
  msg.append(why, 0, len);
  if (s.ok()) s = send_all(fd.value(), msg.data(), msg.size(), std::min(deadline, now_s() + 0.1));
  ::close(fd.value());
  return s;
}

HelloHeader ConnectionManager::hello_to(int peer, uint8_t flags) const {
  HelloHeader h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  h.flags = flags;
  if (keyed()) random_bytes(h.secret, kSecretBytes);  // the hello's nonce (handshake.h)
  else std::memcpy(h.secret, secret_, kSecretBytes);
  h.comm_id = comm_id_;
  h.from_rank = rank_;
  h.to_rank = peer;
  return h;
}

Result<int> ConnectionManager::connect_listener(const PeerInfo& info, double per_try_s, double deadline,
                                                bool* refused) {
  Status last = Status(Code::kRemoteError, "rank " + std::to_string(info.rank) + " publishes no address");
  bool all_refused = true;
  for (const std::string& addr_text : info.listen) {
    auto addr = parse_address(addr_text, 0);
    if (!addr.ok()) continue;
    bool r = false;
    auto fd = connect_to(addr.value(), std::min(deadline, now_s() + per_try_s), -1, &r);
    if (fd.ok()) return fd.value();
    all_refused = all_refused && r;
    last = fd.status();
  }
  if (refused) *refused = all_refused;
  return last;
}

}  // namespace uccl
