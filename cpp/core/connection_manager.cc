#include "core/connection_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "core/loopback_endpoint.h"
#include "topology/local_host.h"
#include "transports/path_choice.h"
#include "topology/topology.h"
#include "transports/registry.h"

namespace uccl {

// An outgoing connection (we are the lower rank): sockets sent their hello, acks pending.
struct ConnectionManager::Outgoing {
  int peer = -1;
  TransportKind kind = TransportKind::kTcp;
  std::unique_ptr<PendingConnect> pending;
  std::vector<int> fds;
  std::vector<size_t> ack_read;       // bytes of (header + answer) read so far, per socket
  std::vector<AckHeader> acks;
  std::string answer;                 // channel 0's answer
  double deadline = 0;
};

// An accepted socket whose hello is still being read.
struct ConnectionManager::Incoming {
  int fd = -1;
  std::string peer_addr;
  HelloHeader hello{};
  size_t got = 0;          // bytes of hello header + offer read so far
  std::string offer;
  double deadline = 0;
};

// Authenticated sockets of one incoming connection, waiting for all its channels.
struct ConnectionManager::Assembling {
  TransportKind kind = TransportKind::kTcp;
  std::vector<int> fds;
  std::string offer;
  int have = 0;
};

namespace {

// "1.2.3.4:5" or "[::1]:5" -> (host, port)
bool split_host_port(const std::string& s, std::string* host, int* port) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  *host = s.substr(0, colon);
  if (!host->empty() && (*host)[0] == '[') *host = host->substr(1, host->size() - 2);
  *port = std::atoi(s.c_str() + colon + 1);
  return true;
}

// start_connect()'s answer while the peer has not created the communicator yet (try again).
const char* const kNotPublishedYet = "peer info not published yet";

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

ConnectionManager::ConnectionManager(int rank, int size, std::shared_ptr<Store> store, const CommOptions& opts,
                                     double timeout_s)
    : rank_(rank), size_(size), store_(std::move(store)), opts_(opts), timeout_s_(timeout_s) {
  endpoints_.resize(size);
  peer_errors_.resize(size);
  transports_.resize(4);
}

ConnectionManager::~ConnectionManager() { close_all(); }

Status ConnectionManager::init() {
  // The job secret and communicator id: rank 0 creates them, everyone else reads them. With
  // them goes whether rank 0's process serves the store (uccl.init(), a TcpStore created with
  // is_server on rank 0): when the store vanishes with that process, errors can then name
  // rank 0 and not only the store's address.
  constexpr size_t kBlobBytes = kSecretBytes + 8 + 1;
  if (rank_ == 0) {
    std::string blob(kBlobBytes, '\0');
    for (size_t i = 0; i < kSecretBytes + 8; i += 8) {
      uint64_t r = random_u64();
      std::memcpy(&blob[i], &r, 8);
    }
    blob[kSecretBytes + 8] = store_->served_here() ? 1 : 0;
    UCCL_RETURN_IF_ERROR(store_->set("uccl/secret", blob));
  }
  auto blob = store_->get("uccl/secret", timeout_s_);
  if (!blob.ok()) return blob.status().with_context("waiting for rank 0 to publish the job secret");
  if (blob.value().size() != kBlobBytes) return Internal("corrupt job secret in the store");
  std::memcpy(secret_, blob.value().data(), kSecretBytes);
  std::memcpy(&comm_id_, blob.value().data() + kSecretBytes, 8);
  if (blob.value()[kSecretBytes + 8] == 1) store_rank_ = 0;

  // Listeners on the selected interfaces (UCCL_SOCKET_IFNAME or the group's own choice).
  const std::string& spec = opts_.socket_ifname.empty() ? config().socket_ifname : opts_.socket_ifname;
  auto ifs = select_interfaces(spec, config().socket_family);
  if (ifs.empty()) return InvalidArgument("no network interface matches UCCL_SOCKET_IFNAME='" + spec + "'");
  for (auto& nif : ifs) {
    if (listen_fds_.size() >= 4) break;
    SockAddr a = nif.addr;
    a.set_port(0);
    auto fd = listen_on(&a);
    if (!fd.ok()) {
      UCCL_WARN("cannot listen on %s (%s): %s", nif.name.c_str(), a.to_string().c_str(),
                fd.status().message().c_str());
      continue;
    }
    set_nonblocking(fd.value(), true);
    listen_fds_.push_back(fd.value());
    me_.listen.push_back(a.to_string());
    me_.nics.push_back({nif.name, "tcp", config().cluster, a.to_string(), nif.speed_gbps});
  }
  if (listen_fds_.empty()) return Status(Code::kSystemError, "could not open any listening socket");

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  me_.rank = rank_;
  me_.host_id = host_identity();
  me_.hostname = host;
  me_.pid = getpid();
  // RDMA NICs, cluster label, fabrics and link rates (sysfs, UCCL_TOPO_FILE, UCCL_CLUSTER).
  UCCL_RETURN_IF_ERROR(describe_local_host(&me_, local_rdma_nics()));
  return store_->set("uccl/peer/" + std::to_string(rank_), me_.serialize());
}

Result<const PeerInfo*> ConnectionManager::peer_info(int peer, double timeout_s) {
  auto it = peer_infos_.find(peer);
  if (it != peer_infos_.end()) return static_cast<const PeerInfo*>(it->second.get());
  if (peer == rank_) {
    peer_infos_[peer] = std::make_unique<PeerInfo>(me_);
    return static_cast<const PeerInfo*>(peer_infos_[peer].get());
  }
  auto text = store_->get("uccl/peer/" + std::to_string(peer), timeout_s);
  if (!text.ok()) return store_error(text.status());
  auto info = PeerInfo::parse(text.value());
  if (!info.ok()) return info.status().with_context("PeerInfo of rank " + std::to_string(peer));
  peer_infos_[peer] = std::make_unique<PeerInfo>(info.take());
  return static_cast<const PeerInfo*>(peer_infos_[peer].get());
}

Result<TransportKind> ConnectionManager::choose_transport(const PeerInfo& peer) {
  const std::string& forced = !opts_.transport.empty() && opts_.transport != "auto" ? opts_.transport : config().transport;
  const bool same_host = peer.host_id == me_.host_id;
  if (forced == "tcp") return TransportKind::kTcp;
  if (forced == "shm") {
    if (!same_host)
      return NotSupported("UCCL_TRANSPORT=shm but rank " + std::to_string(peer.rank) + " is on another host (" +
                          peer.hostname + ")");
    return TransportKind::kShm;
  }
  if (forced != "auto" && !forced.empty()) {
    auto kind = transport_kind_from_name(forced);
    if (!kind.ok()) return kind.status();
    return kind.value();
  }
  // The best common path (topology/path_choice.h): shm on one host, verbs on a shared RDMA
  // fabric once that transport is usable, tcp otherwise.
  return choose_path(me_, peer, transport_available(TransportKind::kVerbs, nullptr)).kind;
}

int ConnectionManager::peer_level(int peer) const {
  if (peer == rank_) return 0;
  auto it = peer_infos_.find(peer);
  return it == peer_infos_.end() ? -1 : pair_level(me_, *it->second);
}

Transport* ConnectionManager::transport(TransportKind kind) {
  auto& t = transports_[static_cast<int>(kind)];
  if (!t) t = make_transport(kind);
  return t.get();
}

PeerContext ConnectionManager::peer_context(int peer) {
  PeerContext c;
  c.my_rank = rank_;
  c.peer_rank = peer;
  c.timeout_s = timeout_s_;
  auto it = peer_infos_.find(peer);
  if (it != peer_infos_.end()) {
    c.peer_host = it->second->hostname;
    c.peer_pid = it->second->pid;
    if (!it->second->listen.empty()) c.peer_address = it->second->listen[0];
  }
  return c;
}

Result<Endpoint*> ConnectionManager::endpoint(int peer) {
  if (peer < 0 || peer >= size_) return InvalidArgument("peer rank " + std::to_string(peer) + " out of range");
  if (endpoints_[peer]) return endpoints_[peer].get();
  if (!peer_errors_[peer].ok()) return peer_errors_[peer];
  if (peer == rank_) {
    endpoints_[peer] = std::make_unique<LoopbackEndpoint>();
    return endpoints_[peer].get();
  }
  if (peer < rank_) {  // the lower rank connects to us
    probe_lower_rank(peer);
    if (!peer_errors_[peer].ok()) return peer_errors_[peer];
    return static_cast<Endpoint*>(nullptr);
  }
  if (!outgoing_.count(peer)) {
    Status s = start_connect(peer);
    if (s.code() == Code::kTimeout && s.message() == kNotPublishedYet) return static_cast<Endpoint*>(nullptr);
    if (!s.ok()) {
      peer_errors_[peer] = s;
      return s;
    }
  }
  return static_cast<Endpoint*>(nullptr);
}

void ConnectionManager::probe_lower_rank(int peer) {
  const double now = now_s();
  ProbeState& st = probes_[peer];
  if (st.waiting_since == 0) st.waiting_since = now;
  if (now - st.waiting_since < 1.0 || now - st.last_probe < 1.0 || assembling_.count(peer)) return;
  st.last_probe = now;
  auto info = peer_info(peer, 0.05);
  if (!info.ok()) {
    if (info.status().code() != Code::kTimeout)  // the store itself is gone (it lived in a dead rank)
      fail_peer(peer, info.status().with_context("waiting for rank " + std::to_string(peer) + " to connect"));
    return;
  }
  auto fd = connect_listener(*info.value(), 0.3, now_s() + 3600);
  if (fd.ok()) {
    const HelloHeader h = hello_to(peer, kHelloProbe);
    send_all(fd.value(), &h, sizeof h, now_s() + 0.3);
    ::close(fd.value());
    return;  // alive: it just has not reached this operation yet
  }
  fail_peer(peer, Status(Code::kRemoteError,
                         peer_context(peer).describe() + " is not listening any more (it exited before connecting)",
                         peer));
}

Status ConnectionManager::start_connect(int peer) {
  // A short lookup: if the peer has not created the communicator yet, try again later.
  auto info = peer_info(peer, 0.05);
  if (!info.ok()) {
    if (info.status().code() == Code::kTimeout) return Status(Code::kTimeout, kNotPublishedYet);
    return info.status();
  }
  auto kind = choose_transport(*info.value());
  if (!kind.ok()) return kind.status();
  Transport* t = transport(kind.value());
  if (!t) return NotSupported(std::string("transport ") + transport_name(kind.value()) + " is not built");
  PeerContext ctx = peer_context(peer);
  auto pending = t->start_connect(ctx);
  if (!pending.ok()) return pending.status().with_context("connecting to " + ctx.describe());

  auto out = std::make_unique<Outgoing>();
  out->peer = peer;
  out->kind = kind.value();
  out->pending.reset(pending.value());
  out->deadline = now_s() + timeout_s_;
  const std::string offer = out->pending->offer();
  const int n = t->sockets_per_connection();
  Status last = Status(Code::kRemoteError, ctx.describe() + " publishes no address");
  // The peer's addresses, those on a network we share first (the cluster fabric before a
  // routed path): tcp then rides the best common network.
  for (const std::string& addr_text : choose_path(me_, *info.value()).peer_addresses) {
    std::string host;
    int port = 0;
    if (!split_host_port(addr_text, &host, &port)) continue;
    auto addr = parse_address(host, port);
    if (!addr.ok()) continue;
    std::vector<int> fds;
    Status s;
    for (int ch = 0; ch < n && s.ok(); ++ch) {
      // The peer listens before it publishes its address, so a refusal means it is gone:
      // retry only briefly (a full accept backlog), and never hold the engine for long.
      auto fd = connect_to(addr.value(), now_s() + std::min(timeout_s_, 2.0));
      if (!fd.ok()) {
        s = Status(Code::kRemoteError, "cannot connect: " + fd.status().message() + " (has the peer exited?)", peer);
        break;
      }
      fds.push_back(fd.value());
      HelloHeader h = hello_to(peer, 0);
      h.transport = static_cast<uint8_t>(kind.value());
      h.channel = ch;
      h.nchannels = n;
      h.offer_bytes = ch == 0 ? offer.size() : 0;
      std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
      if (ch == 0) msg += offer;
      s = send_all(fd.value(), msg.data(), msg.size(), now_s() + 10);
    }
    if (s.ok()) {
      out->fds = fds;
      break;
    }
    for (int fd : fds) ::close(fd);
    last = s.with_context("connecting to " + ctx.describe() + " at " + addr_text);
  }
  if (out->fds.empty()) return last;
  out->ack_read.assign(n, 0);
  out->acks.assign(n, AckHeader{});
  UCCL_INFO("rank %d -> rank %d: connecting over %s (%d socket%s)", rank_, peer, transport_name(kind.value()), n,
            n > 1 ? "s" : "");
  outgoing_[peer] = std::move(out);
  return Status::Ok();
}

bool ConnectionManager::progress_outgoing() {
  bool moved = false;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    Outgoing& o = *it->second;
    PeerContext ctx = peer_context(o.peer);
    Status err;
    bool all_done = true;
    for (size_t ch = 0; ch < o.fds.size() && err.ok(); ++ch) {
      size_t& got = o.ack_read[ch];
      AckHeader& a = o.acks[ch];
      // Read exactly the ack bytes: what follows on the socket belongs to the transport.
      while (err.ok()) {
        size_t want;
        char* dst;
        if (got < sizeof(AckHeader)) {
          want = sizeof(AckHeader) - got;
          dst = reinterpret_cast<char*>(&a) + got;
        } else {
          if (a.magic != kAckMagic) {
            err = Status(Code::kRemoteError, ctx.describe() + " answered the handshake with garbage", o.peer);
            break;
          }
          if (a.answer_bytes > kMaxOfferBytes) {
            err = Status(Code::kRemoteError, ctx.describe() + " sent an oversized handshake answer", o.peer);
            break;
          }
          size_t body = got - sizeof(AckHeader);
          if (body == a.answer_bytes) break;
          if (ch == 0 || a.status != 0) {
            o.answer.resize(a.answer_bytes);
            want = a.answer_bytes - body;
            dst = &o.answer[body];
          } else {
            err = Status(Code::kRemoteError, ctx.describe() + " sent an answer on a secondary socket", o.peer);
            break;
          }
        }
        ssize_t r = ::recv(o.fds[ch], dst, want, MSG_DONTWAIT);
        if (r > 0) {
          got += r;
          moved = true;
          continue;
        }
        if (r == 0) err = peer_closed_error(ctx, "during the handshake");
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) err = SystemError("handshake recv", errno);
        break;
      }
      if (got < sizeof(AckHeader) || got - sizeof(AckHeader) < a.answer_bytes) all_done = false;
      else if (a.status != 0 && err.ok())
        err = Status(static_cast<Code>(a.status), ctx.describe() + " refused the connection: " + o.answer, o.peer);
    }
    if (err.ok() && !all_done && now_s() > o.deadline)
      err = Status(Code::kTimeout, ctx.describe() + " did not answer the connection handshake", o.peer);
    if (!err.ok()) {
      for (int fd : o.fds) ::close(fd);
      fail_peer(o.peer, err);
      it = outgoing_.erase(it);
      continue;
    }
    if (all_done) {
      auto ep = o.pending->finish(o.answer, o.fds);
      if (!ep.ok()) {
        fail_peer(o.peer, ep.status().with_context("connecting to " + ctx.describe()));
      } else {
        endpoints_[o.peer].reset(ep.value());
        UCCL_INFO("rank %d -> rank %d connected: %s", rank_, o.peer, ep.value()->describe().c_str());
      }
      moved = true;
      it = outgoing_.erase(it);
      continue;
    }
    ++it;
  }
  return moved;
}

bool ConnectionManager::accept_new() {
  bool moved = false;
  for (int lfd : listen_fds_) {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = ::accept(lfd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (fd < 0) break;
      set_nonblocking(fd, true);
      set_socket_options(fd);
      auto in = std::make_unique<Incoming>();
      in->fd = fd;
      SockAddr a;
      std::memcpy(&a.ss, &ss, len);
      a.len = len;
      in->peer_addr = a.to_string();
      in->deadline = now_s() + std::min(timeout_s_, 30.0);
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
    bool complete = false;
    for (;;) {
      size_t want;
      char* dst;
      if (in.got < sizeof(HelloHeader)) {
        want = sizeof(HelloHeader) - in.got;
        dst = reinterpret_cast<char*>(&in.hello) + in.got;
      } else {
        if (in.got == sizeof(HelloHeader)) {
          if (in.hello.magic == kHelloMagic && (in.hello.flags & kHelloProbe) && in.hello.comm_id == comm_id_ &&
              std::memcmp(in.hello.secret, secret_, kSecretBytes) == 0) {
            why = "probe";  // a peer checking that this rank is alive: nothing to log
            break;
          }
          why = validate_hello(in.hello, secret_, comm_id_, rank_, size_);
          if (!why.empty()) break;
          in.offer.resize(in.hello.offer_bytes);
        }
        size_t body = in.got - sizeof(HelloHeader);
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
      if (r == 0) why = "closed before finishing the handshake";
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) why = std::string("recv: ") + strerror(errno);
      break;
    }
    if (why.empty() && !complete && now_s() > in.deadline) why = "handshake not completed in time";
    if (!why.empty()) {
      if (why != "probe") UCCL_WARN("refused a connection from %s: %s", in.peer_addr.c_str(), why.c_str());
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
      const int from = in.hello.from_rank;
      auto& asmb = assembling_[from];
      if (!asmb) {
        asmb = std::make_unique<Assembling>();
        asmb->kind = static_cast<TransportKind>(in.hello.transport);
        asmb->fds.assign(in.hello.nchannels, -1);
      }
      if (in.hello.channel < asmb->fds.size() && asmb->fds[in.hello.channel] < 0 && !endpoints_[from]) {
        asmb->fds[in.hello.channel] = in.fd;
        asmb->have++;
        if (in.hello.channel == 0) asmb->offer = in.offer;
      } else {
        UCCL_WARN("refused a duplicate connection from rank %d (%s)", from, in.peer_addr.c_str());
        ::close(in.fd);
      }
      incoming_.erase(incoming_.begin() + i);
      if (asmb->have == static_cast<int>(asmb->fds.size())) finish_incoming(from);
      moved = true;
      continue;
    }
    ++i;
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
    err = NotSupported(std::string("transport ") + transport_name(a->kind) + " is not built on rank " +
                       std::to_string(rank_));
  } else {
    // The ack must be on the wire before the transport's first byte, so send it first for the
    // secondary sockets, and for channel 0 right after accept() produced the answer.
    auto r = t->accept(ctx, a->offer, &answer, a->fds);
    if (r.ok()) ep = r.value();
    else err = r.status();
  }
  for (size_t ch = 0; ch < a->fds.size(); ++ch) {
    const std::string& body = !err.ok() ? err.message() : (ch == 0 ? answer : std::string());
    AckHeader h{kAckMagic, err.ok() ? 0u : static_cast<uint32_t>(err.code()), static_cast<uint32_t>(body.size())};
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    msg += body;
    Status s = send_all(a->fds[ch], msg.data(), msg.size(), now_s() + 10);
    if (!s.ok() && err.ok()) err = s.with_context("acknowledging " + ctx.describe());
  }
  if (!err.ok()) {
    if (ep) delete ep;
    else
      for (int fd : a->fds) ::close(fd);
    fail_peer(from, err.with_context("accepting a connection from " + ctx.describe()));
    return;
  }
  endpoints_[from].reset(ep);
  UCCL_INFO("rank %d <- rank %d connected: %s", rank_, from, ep->describe().c_str());
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

bool ConnectionManager::progress() {
  bool moved = false;
  if (!outgoing_.empty()) moved |= progress_outgoing();
  // accept() on a non-blocking listener with nothing queued is not cheap: the kernel allocates
  // and frees a socket inode before it finds the queue empty (~1-2 us, RCU work included).
  // Called on every progress pass it was the largest cost of a small all_reduce, so listeners
  // are checked at most every kAcceptIntervalS unless a connection is being set up right now
  // (an accepted socket still handshaking, or the rest of a multi-socket connection).
  // The clock itself is read only every kClockEvery calls while idle: on the spin path of a
  // small operation every read (~25 ns on this VM) is a visible share of the latency.
  const bool busy = !incoming_.empty() || !assembling_.empty();
  if (busy || ++calls_since_clock_ >= kClockEvery) {
    calls_since_clock_ = 0;
    const double now = now_s();
    if (busy || now >= next_accept_s_) {
      next_accept_s_ = now + kAcceptIntervalS;
      moved |= accept_new();
    }
  }
  if (!incoming_.empty()) moved |= progress_incoming();
  return moved;
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
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg.append(why, 0, len);
  auto fd = connect_listener(*info.value(), 0.1, deadline);
  if (!fd.ok()) return fd.status();
  Status s = send_all(fd.value(), msg.data(), msg.size(), std::min(deadline, now_s() + 0.1));
  ::close(fd.value());
  return s;
}

HelloHeader ConnectionManager::hello_to(int peer, uint8_t flags) const {
  HelloHeader h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  h.flags = flags;
  std::memcpy(h.secret, secret_, kSecretBytes);
  h.comm_id = comm_id_;
  h.from_rank = rank_;
  h.to_rank = peer;
  return h;
}

Result<int> ConnectionManager::connect_listener(const PeerInfo& info, double per_try_s, double deadline) {
  Status last = Status(Code::kRemoteError, "rank " + std::to_string(info.rank) + " publishes no address");
  for (const std::string& addr_text : info.listen) {
    std::string host;
    int port = 0;
    if (!split_host_port(addr_text, &host, &port)) continue;
    auto addr = parse_address(host, port);
    if (!addr.ok()) continue;
    auto fd = connect_to(addr.value(), std::min(deadline, now_s() + per_try_s));
    if (fd.ok()) return fd.value();
    last = fd.status();
  }
  return last;
}

void ConnectionManager::close_all() {
  for (auto& e : endpoints_) e.reset();
  for (auto& [peer, o] : outgoing_)
    for (int fd : o->fds) ::close(fd);
  outgoing_.clear();
  for (auto& in : incoming_) ::close(in->fd);
  incoming_.clear();
  for (auto& [peer, a] : assembling_)
    for (int fd : a->fds)
      if (fd >= 0) ::close(fd);
  assembling_.clear();
  for (int fd : listen_fds_) ::close(fd);
  listen_fds_.clear();
}

void ConnectionManager::collect_wait_fds(std::vector<int>* fds) const {
  for (int fd : listen_fds_) fds->push_back(fd);
  for (auto& in : incoming_) fds->push_back(in->fd);
  for (auto& [peer, o] : outgoing_)
    for (int fd : o->fds) fds->push_back(fd);
}

std::string ConnectionManager::describe() {
  std::string s = "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " + me_.hostname +
                  " (host id " + me_.host_id + "), listening on";
  for (auto& l : me_.listen) s += " " + l;
  s += "\n";
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    s += "  peer " + std::to_string(p) + ": ";
    if (endpoints_[p]) s += endpoints_[p]->describe();
    else if (!peer_errors_[p].ok()) s += "failed: " + peer_errors_[p].message();
    else {
      auto it = peer_infos_.find(p);
      if (it != peer_infos_.end()) {
        auto k = choose_transport(*it->second);
        s += std::string("not connected yet (would use ") + (k.ok() ? transport_name(k.value()) : "none") + ")";
      } else {
        s += "not connected yet";
      }
    }
    s += "\n";
  }
  return s;
}

}  // namespace uccl
