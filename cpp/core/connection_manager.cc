#include "core/connection_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "algorithms/schedule.h"
#include "algorithms/select.h"
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

std::vector<std::pair<std::string, std::string>> job_wide_settings(const CommOptions& opts) {
  auto out = job_settings();
  auto algo = resolve_algorithm(opts.algorithm);  // Communicator::create checked that it parses
  for (auto& s : out) {
    if (s.first != kAlgo.name() || !algo.ok()) continue;
    s.first = std::string("the algorithm (") + kAlgo.name() + " or the communicator's algorithm option)";
    s.second = algorithm_name(algo.value());
  }
  return out;
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
  // What every rank must share (base/config.h Scope::kJob); the algorithm is this
  // communicator's own (its option, else UCCL_ALGO; Communicator::create checked that it parses).
  me_.settings = job_wide_settings(opts_);
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

StagingOffer ConnectionManager::staging_offer_now() {
  return StagingOffer{staged_offer(), staged_shared_offer()};
}

Endpoint* ConnectionManager::wrap_staged(int peer, Endpoint* ep, const StagingOffer& mine,
                                         const StagingOffer& theirs) {
  if (native_device_memory(ep)) return ep;
  const size_t chunk = mine.chunk && theirs.chunk ? std::min(mine.chunk, theirs.chunk) : mine.chunk + theirs.chunk;
  if (chunk == 0) return ep;
  staged_[peer] = 1;
  // Shared slots: one host (shm), both sides taking them; both sides see the same facts.
  const bool shared = ep->kind() == TransportKind::kShm && mine.shared && theirs.shared;
  return new StagedEndpoint(std::unique_ptr<Endpoint>(ep), chunk, staged_bounce_for(chunk), shared, peer);
}

Result<Endpoint*> ConnectionManager::staged_endpoint(int peer) {
  auto ep = endpoint(peer);
  if (!ep.ok() || !ep.value() || staged_[peer] || native_device_memory(ep.value())) return ep;
  staged_[peer] = 1;
  const std::string why = kStaged.get() == "off" ? "UCCL_STAGED=off"
                                                 : "connected before either rank had device memory to offer "
                                                   "staging; UCCL_STAGED=on splits every pair";
  UCCL_INFO("rank %d <-> rank %d: device messages go whole through one bounce buffer (not pipelined): %s", rank_,
            peer, why.c_str());
  endpoints_[peer] =
      std::make_unique<StagedEndpoint>(std::move(endpoints_[peer]), 0, staged_bounce_for(0), false, peer, why);
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
