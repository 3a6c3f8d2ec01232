#include "core/connection_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "core/connection_state.h"
#include "core/loopback_endpoint.h"
#include "topology/local_host.h"
#include "topology/rails.h"
#include "topology/topology.h"
#include "transports/registry.h"
#include "transports/staged/staged_endpoint.h"

namespace uccl {
namespace {

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Hosts (an address without its port) that did not answer a connect within its window (a
// timeout, not a refusal: a dead link or NIC, a black-holed route), remembered process-wide
// for kUnansweredMemoryS. Every communicator of a process dials the same hosts (a trainer's
// TP/PP/DP groups, each split), and each would otherwise hold its engine for the whole connect
// window on that lane again before falling back.
constexpr double kUnansweredMemoryS = 60;
std::mutex g_unanswered_mu;
std::map<std::string, double> g_unanswered;  // host -> when it last did not answer

std::string host_part(const std::string& address) { return address.substr(0, address.rfind(':')); }

void note_unanswered(const std::string& address) {
  std::lock_guard<std::mutex> lock(g_unanswered_mu);
  g_unanswered[host_part(address)] = now_s();
}

// Seconds since `address`'s host last did not answer, or -1 (never, or long enough ago).
double unanswered_ago(const std::string& address) {
  std::lock_guard<std::mutex> lock(g_unanswered_mu);
  auto it = g_unanswered.find(host_part(address));
  if (it == g_unanswered.end()) return -1;
  const double ago = now_s() - it->second;
  return ago < kUnansweredMemoryS ? ago : -1;
}

}  // namespace

ConnectionManager::ConnectionManager(int rank, int size, std::shared_ptr<Store> store, const CommOptions& opts,
                                     double timeout_s)
    : rank_(rank), size_(size), store_(std::move(store)), opts_(opts), timeout_s_(timeout_s) {
  endpoints_.resize(size);
  staged_.assign(size, 0);
  peer_errors_.resize(size);
  next_path_.assign(size, 0);
  unanswered_since_.assign(size, 0);
  redial_at_.assign(size, 0);
  fallback_notes_.resize(size);
  transports_.resize(kMaxTransports);
}

ConnectionManager::~ConnectionManager() {
  close_all();
  if (agree_fd_ >= 0) ::close(agree_fd_);
}

Status ConnectionManager::init() {
  Result<std::string> key = job_key();
  if (!key.ok()) return key.status();
  key_ = key.value();
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
  // A per-local-rank list picks this rank's rail NIC (base/net.h rail_ifname_spec).
  const std::string& ifnames = opts_.socket_ifname.empty() ? kSocketIfname.get() : opts_.socket_ifname;
  const std::string spec = rail_ifname_spec(ifnames, launcher_local_rank(), &rail_why_);
  auto ifs = select_interfaces(spec, kSocketFamily.get());
  if (!rail_why_.empty() && launcher_local_rank() >= 0 && with_link(ifs).empty()) {
    // The list's rail NIC for this rank is missing or has no link: every rail's NIC instead.
    auto all = rail_fallback(select_interfaces(rail_ifname_spec(ifnames, -1), kSocketFamily.get()),
                             rail_why_ + " ('" + spec + "') " +
                                 (ifs.empty() ? "matches no interface" : "has no link"),
                             &rail_why_);
    if (!all.ok()) return all.status();
    ifs = all.take();
  }
  if (ifs.empty()) return InvalidArgument("no network interface matches UCCL_SOCKET_IFNAME='" + spec + "'");
  if (rail_why_.empty()) {  // no list: the topology file's rail, or by PCIe or local rank
    auto rail = rail_interfaces(ifs, &rail_why_);
    if (!rail.ok()) return rail.status();
    ifs = rail.take();
  }
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
    me_.nics.push_back({nif.name, "tcp", kCluster.get(), a.to_string(), nif.speed_gbps, nif.network});
  }
  if (listen_fds_.empty()) return Status(Code::kSystemError, "could not open any listening socket");
  open_agreement_listener();

  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  me_.rank = rank_;
  me_.host_id = host_identity();
  me_.hostname = host;
  me_.machine = machine_identity();
  me_.pid = getpid();
  me_.staging_chunk = staged_offer();
  me_.staging_shared = staged_shared_offer();
  // RDMA NICs, cluster label, fabrics and link rates (sysfs, UCCL_TOPO_FILE, UCCL_CLUSTER).
  UCCL_RETURN_IF_ERROR(describe_local_host(&me_, local_rdma_nics()));
  return store_->set("uccl/peer/" + std::to_string(rank_), me_.serialize());
}

namespace {
// A transport that moves device memory itself (cuda_ipc) is never put behind a staged endpoint:
// both sides of a pair use the same transport, so both skip the wrapper alike.
bool native_device_memory(const Endpoint* ep) {
  const TransportEntry* e = find_transport(ep->kind());
  return e && e->native_device_memory;
}
}  // namespace

Endpoint* ConnectionManager::wrap_staged(int peer, Endpoint* ep) {
  if (native_device_memory(ep)) return ep;
  size_t chunk = me_.staging_chunk;
  auto info = peer_info(peer, timeout_s_);
  const size_t theirs = info.ok() ? info.value()->staging_chunk : 0;
  if (theirs > 0) chunk = chunk > 0 ? std::min(chunk, theirs) : theirs;
  if (chunk == 0) return ep;
  staged_[peer] = 1;
  // Shared slots: one host (shm), both ranks offering them; both sides see the same facts.
  const bool shared = ep->kind() == TransportKind::kShm && me_.staging_shared && info.ok() &&
                      info.value()->staging_shared;
  return new StagedEndpoint(std::unique_ptr<Endpoint>(ep), chunk, kStagedBounce.get(), shared, peer);
}

Result<Endpoint*> ConnectionManager::staged_endpoint(int peer) {
  auto ep = endpoint(peer);
  if (!ep.ok() || !ep.value() || staged_[peer] || native_device_memory(ep.value())) return ep;
  staged_[peer] = 1;
  endpoints_[peer] = std::make_unique<StagedEndpoint>(std::move(endpoints_[peer]), 0, kStagedBounce.get(), false, peer);
  return endpoints_[peer].get();
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

Result<std::vector<PathChoice>> ConnectionManager::paths_to(const PeerInfo& peer) {
  // The communicator's transport option, else UCCL_TRANSPORT: "auto" or names in order.
  const std::string& forced = !opts_.transport.empty() && opts_.transport != "auto" ? opts_.transport : kTransport.get();
  return path_candidates(me_, peer, forced);
}

int ConnectionManager::peer_level(int peer) const {
  if (peer == rank_) return 0;
  auto it = peer_infos_.find(peer);
  return it == peer_infos_.end() ? -1 : pair_level(me_, *it->second);
}

Transport* ConnectionManager::transport(TransportKind kind) {
  if (static_cast<int>(kind) >= kMaxTransports) return nullptr;
  auto& t = transports_[static_cast<int>(kind)];
  if (!t) {
    const TransportEntry* e = find_transport(kind);
    if (e) t = e->make();
  }
  return t.get();
}

void ConnectionManager::note_fallback(int peer, const std::string& what, bool one_network) {
  if (one_network) UCCL_WARN("rank %d -> rank %d: %s; connecting over one network", rank_, peer, what.c_str());
  else UCCL_INFO("rank %d <-> rank %d: %s; trying the next transport", rank_, peer, what.c_str());
  std::string& n = fallback_notes_[peer];
  n += (n.empty() ? "" : "; ") + what;
}

PeerContext ConnectionManager::peer_context(int peer) {
  PeerContext c;
  c.my_rank = rank_;
  c.peer_rank = peer;
  c.timeout_s = timeout_s_;
  c.link_key = link_key(peer);
  auto it = peer_infos_.find(peer);
  if (it != peer_infos_.end()) {
    c.level = pair_level(me_, *it->second);
    c.peer_host = it->second->hostname;
    c.peer_pid = it->second->pid;
    if (!it->second->listen.empty()) c.peer_address = it->second->listen[0];
  }
  return c;
}

PeerContext ConnectionManager::transport_context(int peer, const Transport& t, bool striped) {
  PeerContext c = peer_context(peer);
  auto it = peer_infos_.find(peer);
  if (striped && it != peer_infos_.end() && t.stripes_over_networks()) {
    for (const StripeLane& l : pair_lanes(me_, *it->second)) {
      c.lane_gbps.push_back(l.gbps);
      c.lane_names.push_back(l.network);
    }
  }
  return c;
}

std::string ConnectionManager::link_key(int peer) const {
  const int lo = std::min(rank_, peer), hi = std::max(rank_, peer);
  std::string data(reinterpret_cast<const char*>(&comm_id_), sizeof comm_id_);
  data.append(reinterpret_cast<const char*>(&lo), sizeof lo);
  data.append(reinterpret_cast<const char*>(&hi), sizeof hi);
  return hmac_sha256(keyed() ? key_ : std::string(reinterpret_cast<const char*>(secret_), kSecretBytes),
                     "uccl link key", data);
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
  if (!outgoing_.count(peer) && now_s() >= redial_at_[peer]) {
    Status s = start_connect(peer);  // Ok also while the peer has not published its info yet
    if (!s.ok()) {
      peer_errors_[peer] = s;
      return s;
    }
  }
  return static_cast<Endpoint*>(nullptr);
}

Status ConnectionManager::start_connect(int peer) {
  // A short lookup: if the peer has not created the communicator yet, try again later.
  auto info = peer_info(peer, 0.05);
  if (!info.ok()) return info.status().code() == Code::kTimeout ? Status::Ok() : info.status();
  auto paths = paths_to(*info.value());
  if (!paths.ok()) return paths.status().with_context("connecting to " + peer_context(peer).describe());
  // Walk the candidates from where the last attempt stopped: a transport that answered
  // kNotSupported (here, or in the peer's accept) is a normal answer, and the next one is tried.
  for (size_t& i = next_path_[peer]; i < paths.value().size(); ++i) {
    const PathChoice& path = paths.value()[i];
    Transport* t = transport(path.kind);
    if (!t) {
      note_fallback(peer, path.name + " is not built here");
      continue;
    }
    PeerContext ctx = transport_context(peer, *t, /*striped=*/true);
    auto pending = t->start_connect(ctx);
    if (!pending.ok() && pending.status().code() == Code::kNotSupported) {
      note_fallback(peer, path.name + " refused here: " + pending.status().message());
      continue;
    }
    if (!pending.ok()) return pending.status().with_context("connecting to " + ctx.describe());
    return dial(peer, path, t, std::unique_ptr<PendingConnect>(pending.value()));
  }
  return Status(Code::kNotSupported,
                "no transport could connect to " + peer_context(peer).describe() + ": " + fallback_notes_[peer], peer);
}

Status ConnectionManager::dial(int peer, const PathChoice& path, Transport* t, std::unique_ptr<PendingConnect> pending) {
  auto out = std::make_unique<Outgoing>();
  out->peer = peer;
  out->kind = path.kind;
  out->pending = std::move(pending);
  out->dialing = std::make_unique<Dialing>();
  Dialing& d = *out->dialing;
  d.transport = t;
  d.path_name = path.name;
  d.last = Status(Code::kRemoteError, peer_context(peer).describe() + " publishes no address");
  // Each attempt lists the address of every socket's lane: first, with several common networks,
  // the peer's address on each (striping); then each of the peer's addresses alone, those on a
  // network we share first (the cluster fabric before a routed path), so a lane that does not
  // connect falls back to one network.
  if (t->stripes_over_networks()) {
    std::vector<std::string> lanes;
    for (const StripeLane& l : pair_lanes(me_, *peer_infos_.at(peer))) lanes.push_back(l.peer_address);
    d.striping = d.pending_striped = !lanes.empty();
    for (const std::string& a : lanes) {
      const double ago = unanswered_ago(a);
      if (ago < 0) continue;
      if (unanswered_since_[peer] == 0)  // (said once, not on every try again)
        note_fallback(peer, "striping skipped: " + host_part(a) + " did not answer a connect " +
                              std::to_string(static_cast<int>(ago + 0.5)) + " s ago", /*one_network=*/true);
      d.striping = false;
      break;
    }
    if (d.striping) d.attempts.push_back(lanes);
  }
  // One address at a time; those that did not answer lately last.
  const size_t singles = d.attempts.size();
  for (const std::string& a : path.peer_addresses) d.attempts.push_back({a});
  std::stable_partition(d.attempts.begin() + singles, d.attempts.end(),
                        [](const std::vector<std::string>& a) { return unanswered_ago(a[0]) < 0; });
  out->nchannels =
      std::max<int>(t->sockets_per_connection(), d.attempts.empty() ? 1 : static_cast<int>(d.attempts[0].size()));
  outgoing_[peer] = std::move(out);
  return Status::Ok();
}

ConnectionManager::DialStep ConnectionManager::advance_dial(Outgoing& o, Status* failed) {
  Dialing& d = *o.dialing;
  // Every socket of an attempt is opened before any hello is sent: the peer assembles a
  // connection from the hellos, and one half-announced by an attempt that then failed would
  // hold the place of the next.
  while (d.attempt < d.attempts.size()) {
    const std::vector<std::string>& attempt = d.attempts[d.attempt];
    const std::string& address = attempt[d.fds.size() % attempt.size()];
    Status s;
    if (!d.socket) {
      // The peer listens before it publishes its address, so a refusal means it is gone: retry
      // only briefly (a full accept backlog). Once one address refused for that long, the others
      // get one try each against a refusal (an address that does not answer at all still gets
      // the window: another network's route).
      auto addr = parse_address(address, 0);
      if (addr.ok())
        d.socket = std::make_unique<Dialer>(addr.value(), now_s() + std::min(timeout_s_, 2.0),
                                            d.refused_before ? now_s() : -1);
      else
        s = addr.status();
    }
    if (d.socket) {
      const Dialer::State st = d.socket->step();
      if (st == Dialer::State::kPending) return DialStep::kDialing;
      if (st == Dialer::State::kConnected) {
        d.fds.push_back(d.socket->take());
        d.socket.reset();
        if (static_cast<int>(d.fds.size()) < o.nchannels) continue;
        o.fds.swap(d.fds);
        o.striped = d.striping && d.attempt == 0;
        return DialStep::kOpen;
      }
      const bool refused = d.socket->refused();
      d.refused_before = d.refused_before || refused;
      if (!refused) note_unanswered(address);
      s = Status(Code::kRemoteError,
                 "cannot connect: " + d.socket->error().message() + (refused ? " (has the peer exited?)" : ""), o.peer);
      d.socket.reset();
    }
    for (int fd : d.fds) ::close(fd);
    d.fds.clear();
    const std::string addr_text = attempt.size() == 1 ? attempt[0] : "its address on each common network";
    d.last = s.with_context("connecting to " + peer_context(o.peer).describe() + " at " + addr_text);
    if (d.striping && d.attempt == 0 && unanswered_since_[o.peer] == 0)  // a NIC the pair should share does not reach the peer
      note_fallback(o.peer, "striping over " + addr_text + " failed (" + s.message() + ")", /*one_network=*/true);
    ++d.attempt;
  }
  // No host answered at all (a lossy or congested network drops SYNs too): try again on a later
  // pass until the dead-link bound, instead of failing the peer after one window.
  if (!d.refused_before && !unanswered_too_long(o.peer)) {
    UCCL_INFO("rank %d -> rank %d: %s; trying again", rank_, o.peer, d.last.message().c_str());
    return DialStep::kRetryLater;
  }
  *failed = d.refused_before ? d.last
                             : Status(d.last.code(), d.last.message() + "; its host " + no_answer_text(o.peer), o.peer);
  return DialStep::kFailed;
}

Status ConnectionManager::open_outgoing(Outgoing& o) {
  std::unique_ptr<Dialing> d = std::move(o.dialing);
  PeerContext ctx = peer_context(o.peer);
  const int n = o.nchannels;
  o.deadline = now_s() + timeout_s_;
  unanswered_since_[o.peer] = 0;
  if (d->pending_striped && !o.striped) {  // one network after all: the transport must not weigh lanes
    auto plain = d->transport->start_connect(transport_context(o.peer, *d->transport, /*striped=*/false));
    if (!plain.ok()) return plain.status().with_context("connecting to " + ctx.describe());
    o.pending.reset(plain.value());
  }
  o.offer = o.pending->offer();
  if (!keyed()) {  // keyed: each hello follows the peer's greeting (greet_outgoing)
    for (int ch = 0; ch < n; ++ch) {
      std::string msg;
      const HelloHeader h = connection_hello(o, ch);
      msg.assign(reinterpret_cast<const char*>(&h), sizeof h);
      if (ch == 0) msg += o.offer;
      Status s = send_all(o.fds[ch], msg.data(), msg.size(), now_s() + 10);
      if (!s.ok()) return s.with_context("connecting to " + ctx.describe());
    }
  }
  o.ack_read.assign(n, 0);
  o.acks.assign(n, AckHeader{});
  o.greetings.assign(n, Greeting{});
  o.greeting_read.assign(n, keyed() ? 0 : sizeof(Greeting));
  o.hellos.assign(n, HelloHeader{});
  o.ack_macs.assign(n, std::string(keyed() ? kMacBytes : 0, '\0'));
  UCCL_INFO("rank %d -> rank %d: connecting over %s (%d socket%s)", rank_, o.peer, d->path_name.c_str(), n,
            n > 1 ? "s" : "");
  return Status::Ok();
}

std::string ConnectionManager::connecting_text(const Outgoing& o) const {
  std::string s = "connecting over " + std::string(transport_name(o.kind));
  if (const Dialing* d = o.dialing.get()) {
    if (d->attempt < d->attempts.size()) {
      const std::vector<std::string>& a = d->attempts[d->attempt];
      s += ", opening socket " + std::to_string(d->fds.size() + 1) + " of " + std::to_string(o.nchannels) + " to " +
           a[d->fds.size() % a.size()] + " (attempt " + std::to_string(d->attempt + 1) + " of " +
           std::to_string(d->attempts.size()) + ")";
    }
    if (unanswered_since_[o.peer] > 0) s += "; its host " + no_answer_text(o.peer);
  } else {
    s += ", waiting for its acknowledgement";
  }
  return s;
}

HelloHeader ConnectionManager::connection_hello(const Outgoing& o, size_t ch) const {
  HelloHeader h = hello_to(o.peer, o.striped ? kHelloStriped : 0);  // keyed: a fresh nonce in h.secret
  h.transport = static_cast<uint8_t>(o.kind);
  h.channel = static_cast<uint32_t>(ch);
  h.nchannels = static_cast<uint32_t>(o.nchannels);
  h.offer_bytes = ch == 0 ? static_cast<uint32_t>(o.offer.size()) : 0;
  return h;
}

bool ConnectionManager::progress_outgoing() {
  bool moved = false;
  const size_t mac_len = keyed() ? kMacBytes : 0;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    Outgoing& o = *it->second;
    if (o.dialing) {
      Status failed;
      const DialStep step = advance_dial(o, &failed);
      if (step == DialStep::kDialing) {
        ++it;
        continue;
      }
      moved = true;
      if (step == DialStep::kOpen) failed = open_outgoing(o);
      if (step == DialStep::kRetryLater) redial_at_[o.peer] = now_s() + 0.1;  // (a route that fails at once)
      if (step == DialStep::kRetryLater || !failed.ok()) {  // retry: endpoint() starts it again
        for (int fd : o.fds) ::close(fd);
        if (!failed.ok()) fail_peer(o.peer, failed);
        it = outgoing_.erase(it);
        continue;
      }
    }
    PeerContext ctx = peer_context(o.peer);
    bool greeted = true;
    Status err = keyed() ? greet_outgoing(o, &greeted, &moved) : Status::Ok();
    bool all_done = greeted;
    for (size_t ch = 0; ch < o.fds.size() && err.ok() && greeted; ++ch) {
      size_t& got = o.ack_read[ch];
      AckHeader& a = o.acks[ch];
      const size_t head = sizeof(AckHeader) + mac_len;
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
          if (got < head) {  // keyed: the ack's MAC
            want = head - got;
            dst = &o.ack_macs[ch][got - sizeof(AckHeader)];
          } else {
            size_t body = got - head;
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
        }
        ssize_t r = ::recv(o.fds[ch], dst, want, MSG_DONTWAIT);
        if (r > 0) {
          got += r;
          moved = true;
          continue;
        }
        if (r == 0 || errno == ECONNRESET)
          err = peer_closed_error(ctx, "during the handshake: socket " + std::to_string(ch) + " of " +
                                           std::to_string(o.fds.size()) + (r == 0 ? ", closed" : ", reset"));
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          err = SystemError("handshake recv", errno).with_context("connecting to " + ctx.describe());
        break;
      }
      if (got < head || got - head < a.answer_bytes) {
        all_done = false;
        continue;
      }
      if (keyed() && err.ok() && a.status != static_cast<uint32_t>(Code::kUnauthenticated) &&
          !equal_ct(ack_mac(key_, o.greetings[ch].nonce, o.hellos[ch], a).data(), o.ack_macs[ch].data(), kMacBytes))
        err = Status(Code::kUnauthenticated,
                     ctx.describe() + " does not know this job's key (wrong MAC on its acknowledgement: another "
                                      "UCCL_JOB_KEY?); nothing was sent to it",
                     o.peer);
      if (a.status != 0 && err.ok())
        err = Status(static_cast<Code>(a.status), ctx.describe() + " refused the connection: " + o.answer, o.peer);
    }
    if (err.code() == Code::kNotSupported) {
      // The peer cannot take this transport: the next endpoint() call tries the next one.
      for (int fd : o.fds) ::close(fd);
      note_fallback(o.peer, std::string(transport_name(o.kind)) + " refused by rank " + std::to_string(o.peer) + ": " +
                                o.answer);
      ++next_path_[o.peer];
      it = outgoing_.erase(it);
      moved = true;
      continue;
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
        endpoints_[o.peer].reset(wrap_staged(o.peer, ep.value()));
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
  if (!assembling_.empty()) moved |= expire_assemblies(now_s());
  return moved;
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
  for (auto& [peer, o] : outgoing_) {
    for (int fd : o->fds) fds->push_back(fd);
    // A socket still connecting: an error wakes the poll; its success (POLLOUT) is seen by the
    // next pass, the sleep being bounded.
    if (o->dialing && o->dialing->socket && o->dialing->socket->fd() >= 0) fds->push_back(o->dialing->socket->fd());
  }
  for (auto& [peer, st] : probes_)
    if (st.dialer && st.dialer->fd() >= 0) fds->push_back(st.dialer->fd());
}

std::string ConnectionManager::describe() {
  std::string s = "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " + me_.hostname +
                  " (host id " + me_.host_id + "), listening on";
  for (auto& l : me_.listen) s += " " + l;
  if (!rail_why_.empty()) {
    s += " (rail NIC";
    for (auto& n : me_.nics)
      if (n.kind == "tcp") s += " " + n.name;
    s += ": " + rail_why_ + ")";
  }
  s += "\n";
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    s += "  peer " + std::to_string(p) + ": ";
    if (endpoints_[p]) s += endpoints_[p]->describe();
    else if (!peer_errors_[p].ok()) s += "failed: " + peer_errors_[p].message();
    else if (outgoing_.count(p)) s += connecting_text(*outgoing_.at(p));
    else {
      auto it = peer_infos_.find(p);
      if (it != peer_infos_.end()) {
        auto paths = paths_to(*it->second);
        const size_t next = next_path_[p];
        s += "not connected yet (would use " +
             (paths.ok() && next < paths.value().size() ? paths.value()[next].name : std::string("none")) + ")";
      } else {
        s += "not connected yet";
      }
      if (p < rank_) s += ", waiting for it to connect (the lower rank connects)";
      if (unanswered_since_[p] > 0) s += "; its host " + no_answer_text(p);
    }
    // Why this peer is not on the transport the table would pick first.
    if (!fallback_notes_[p].empty()) s += " (fell back: " + fallback_notes_[p] + ")";
    s += "\n";
  }
  return s;
}

}  // namespace uccl
