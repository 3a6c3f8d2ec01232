// VerbsTransport and VerbsPendingConnect: connection setup (see transport.h's rendezvous).
//
//   active : start_connect() creates QPs (INIT, receives posted) -> offer() describes them
//   passive: accept(offer) creates its QPs, moves them to RTR/RTS, answers
//   active : finish(answer) moves its QPs to RTR/RTS; the endpoint's first control message
//            (READY, over QP 0) tells the passive side it may send from now on (its packets
//            would otherwise hit a QP still in INIT and cost a retry timeout).
// Nothing here blocks on the peer, and nothing is ever written to the liveness socket.
#include "transports/verbs/verbs_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "topology/rails.h"
#include "transports/verbs/verbs_channel.h"
#include "transports/verbs/verbs_device.h"
#include "transports/path_choice.h"
#include "transports/stripe.h"
#include "transports/verbs/verbs_endpoint.h"
#include "transports/verbs/verbs_lanes.h"
#include "transports/verbs/verbs_mr_cache.h"

namespace uccl {
namespace {

// Exactly one liveness socket is expected; extras are closed (we own them).
int take_liveness_fd(const std::vector<int>& fds) {
  for (size_t i = 1; i < fds.size(); ++i) ::close(fds[i]);
  return fds.empty() ? -1 : fds[0];
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

// A port as match_lanes sees it: a local one (PortInfo) or one from the peer's offer (VerbsConnInfo).
LanePort lane_port(const std::string& name, const std::string& link_layer, const std::string& fabric,
                   const uint8_t* gid_raw, unsigned lid, double gbps) {
  ibv_gid g;
  std::memcpy(g.raw, gid_raw, 16);
  return {name, link_layer, fabric, gid_to_string(g) + "/" + std::to_string(lid), gbps};
}
LanePort lane_port(const VerbsConnInfo& c) { return lane_port(c.device, c.link_layer, c.fabric, c.gid, c.lid, c.gbps); }
LanePort lane_port(const PortInfo& p) {
  return lane_port(p.nic.name, p.nic.link_layer, p.nic.fabric, p.gid.raw, p.lid, p.nic.gbps);
}

// QPs per lane: UCCL_IB_QPS_PER_CONNECTION each, as long as the connection's mask has room.
int lane_qps(const VerbsOptions& o, size_t lanes) {
  return std::max(1, std::min(o.qps_per_connection, static_cast<int>(kMaxConnQps / std::max<size_t>(1, lanes))));
}

class VerbsPendingConnect : public PendingConnect {
 public:
  VerbsPendingConnect(std::vector<VerbsLane> lanes, const VerbsOptions& o, const PeerContext& peer, std::string notes)
      : lanes_(std::move(lanes)), options_(o), peer_(peer), notes_(std::move(notes)) {}

  std::string offer() override {
    VerbsConnInfo c = lanes_[0].ch->local_info();
    for (size_t i = 1; i < lanes_.size(); ++i)
      c.lanes.push_back({lanes_[i].id, std::make_shared<VerbsConnInfo>(lanes_[i].ch->local_info())});
    return c.serialize();
  }

  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    int fd = take_liveness_fd(fds);
    auto fail = [&](const Status& s) -> Result<Endpoint*> {
      close_fd(fd);
      return s.with_context("verbs connect to " + peer_.describe());
    };
    if (fd < 0) return fail(Internal("verbs finish() needs one liveness socket"));
    if (lanes_.empty()) return fail(Internal("verbs finish() called twice"));
    auto remote = VerbsConnInfo::parse(answer);
    if (!remote.ok()) return fail(remote.status());
    VerbsChannel& ch = *lanes_[0].ch;
    if (remote.value().qpn.size() > ch.nqp()) return fail(Internal("the answer has more QPs than offered"));
    ch.trim(remote.value().qpn.size());
    Status s = ch.connect(remote.value(), options_);
    if (!s.ok()) return fail(s);
    lanes_[0].peer_device = remote.value().device;
    lanes_[0].gbps = lane_rate(lane_port(ch.local_info()), lane_port(remote.value()));
    // The other lanes: those the peer paired with one of its ports and that connect here too.
    std::vector<VerbsLane> kept;
    kept.push_back(std::move(lanes_[0]));
    for (size_t i = 1; i < lanes_.size(); ++i) {
      VerbsLane& l = lanes_[i];
      const VerbsConnInfo* r = nullptr;
      for (auto& a : remote.value().lanes)
        if (a.index == l.id) r = a.info.get();
      if (!r) {
        note(l.ch->device().name() + ": not paired by the peer (no free port of its own on that fabric, or it failed there)");
        continue;
      }
      Status ls = r->qpn.size() > l.ch->nqp() ? Internal("the answer has more QPs than offered") : Status::Ok();
      if (ls.ok()) {
        l.ch->trim(r->qpn.size());
        ls = options_.fail_lane_for_testing == static_cast<int>(l.id) ? Status(Code::kSystemError, "test: lane refused")
                                                                      : l.ch->connect(*r, options_);
      }
      if (!ls.ok()) {
        note(l.ch->device().name() + ": " + ls.message());
        continue;
      }
      l.peer_device = r->device;
      l.gbps = lane_rate(lane_port(l.ch->local_info()), lane_port(*r));
      kept.push_back(std::move(l));
    }
    lanes_.clear();
    return static_cast<Endpoint*>(new VerbsEndpoint(std::move(kept), remote.value(), peer_, fd, true, notes_, options_));
  }

 private:
  void note(const std::string& what) {
    UCCL_INFO("verbs connect to %s: lane left out: %s", peer_.describe().c_str(), what.c_str());
    notes_ += (notes_.empty() ? "" : "; ") + what;
  }

  std::vector<VerbsLane> lanes_;
  VerbsOptions options_;
  PeerContext peer_;
  std::string notes_;  // lanes left out, for describe()
};

class VerbsTransport : public Transport {
 public:
  explicit VerbsTransport(const VerbsOptions& o) : options_(o) {}
  TransportKind kind() const override { return TransportKind::kVerbs; }
  int sockets_per_connection() const override { return 1; }

  Result<PendingConnect*> start_connect(const PeerContext& peer) override {
    auto devs = devices();
    if (!devs.ok()) return devs.status();
    std::string notes;
    std::vector<VerbsLane> lanes;
    const int nqp = lane_qps(options_, devs.value().size());
    for (size_t i = 0; i < devs.value().size(); ++i) {
      auto ch = VerbsChannel::create(devs.value()[i], nqp, lanes.size());
      if (!ch.ok() && i == 0) return ch.status().with_context("verbs connect to " + peer.describe());
      if (!ch.ok()) {
        notes += (notes.empty() ? "" : "; ") + devs.value()[i]->name() + ": " + ch.status().message();
        continue;
      }
      VerbsLane l;
      l.id = static_cast<uint32_t>(lanes.size());
      l.ch = ch.take();
      lanes.push_back(std::move(l));
    }
    return static_cast<PendingConnect*>(new VerbsPendingConnect(std::move(lanes), options_, peer, notes));
  }

  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    // On failure the fds stay the core's: it answers the refusal on them and closes them.
    auto fail = [&](const Status& s) -> Result<Endpoint*> { return s.with_context("verbs accept from " + peer.describe()); };
    if (fds.empty()) return fail(Internal("verbs accept() needs one liveness socket"));
    auto devs = devices();
    if (!devs.ok()) return fail(devs.status());
    auto parsed = VerbsConnInfo::parse(offer);
    if (!parsed.ok()) return fail(parsed.status());
    const VerbsConnInfo& remote = parsed.value();
    // Pair each offered lane with one of our ports (verbs_lanes.h); lane 0 falls back to our
    // first port when none is on its fabric (the peer's offer may predate fabrics in offers).
    std::vector<LanePort> offered{lane_port(remote)}, local;
    for (auto& l : remote.lanes) offered.push_back(lane_port(*l.info));
    for (auto& d : devs.value()) local.push_back(lane_port(d->port()));
    const std::vector<int> match = match_lanes(offered, local);
    const size_t nlanes = 1 + std::count_if(match.begin() + 1, match.end(), [](int m) { return m >= 0; });
    const int per_lane = lane_qps(options_, match[0] >= 0 ? nlanes : 1);
    std::string notes;
    std::vector<VerbsLane> lanes;
    for (size_t i = 0; i < offered.size(); ++i) {
      if (i > 0 && match[0] < 0) break;  // lane 0 on a port of another fabric: no striping
      const VerbsConnInfo& r = i == 0 ? remote : *remote.lanes[i - 1].info;
      const uint32_t id = i == 0 ? 0 : remote.lanes[i - 1].index;
      if (i > 0 && match[i] < 0) {
        notes += (notes.empty() ? "" : "; ") + r.device + " (peer): no free port of ours on " + r.fabric;
        continue;
      }
      std::shared_ptr<VerbsDevice> dev = devs.value()[match[i] >= 0 ? match[i] : 0];
      const int nqp = std::min<int>(static_cast<int>(r.qpn.size()), per_lane);
      auto ch = VerbsChannel::create(dev, nqp, id);
      Status s = ch.ok() ? Status::Ok() : ch.status();
      if (s.ok() && i > 0 && options_.fail_lane_for_testing == static_cast<int>(id))
        s = Status(Code::kSystemError, "test: lane refused");
      if (s.ok()) s = ch.value()->connect(r, options_);
      if (!s.ok() && i == 0) return fail(s);
      if (!s.ok()) {
        notes += (notes.empty() ? "" : "; ") + dev->name() + ": " + s.message();
        continue;
      }
      VerbsLane l;
      l.id = id;
      l.ch = ch.take();
      l.peer_device = r.device;
      l.gbps = lane_rate(local[match[i] >= 0 ? match[i] : 0], offered[i]);
      lanes.push_back(std::move(l));
    }
    VerbsConnInfo mine = lanes[0].ch->local_info();
    for (size_t i = 1; i < lanes.size(); ++i)
      mine.lanes.push_back({lanes[i].id, std::make_shared<VerbsConnInfo>(lanes[i].ch->local_info())});
    *answer = mine.serialize();
    const int fd = take_liveness_fd(fds);
    return static_cast<Endpoint*>(new VerbsEndpoint(std::move(lanes), remote, peer, fd, false, notes, options_));
  }

 private:
  // The ports this rank stripes over, the first ACTIVE one selected by UCCL_IB_HCA first (the
  // port a connection used before striping), then the other ACTIVE ones; only the first with
  // UCCL_STRIPE_NETWORKS=off. Opened on first use, so constructing a transport never fails.
  Result<std::vector<std::shared_ptr<VerbsDevice>>> devices() {
    if (!devices_.empty()) return devices_;
    auto first = VerbsDevice::open(options_);
    if (!first.ok()) return first.status();
    devices_.push_back(first.value());
    if (!options_.stripe) return devices_;
    auto ports = enumerate_ports(options_.hca, options_.gid_index);
    if (!ports.ok()) return devices_;
    for (const PortInfo& p : ports.value()) {
      if (!p.nic.active || p.nic.name == first.value()->name() || devices_.size() >= kMaxLanes) continue;
      VerbsOptions o = options_;
      o.hca = "=" + p.nic.device + ":" + std::to_string(p.nic.port);
      auto d = VerbsDevice::open(o);
      if (d.ok()) devices_.push_back(d.value());
      else UCCL_INFO("verbs: port %s left out of striping: %s", p.nic.name.c_str(), d.status().message().c_str());
    }
    return devices_;
  }

  VerbsOptions options_;
  std::vector<std::shared_ptr<VerbsDevice>> devices_;
};

}  // namespace

const TextSetting kIbHca("verbs", "UCCL_IB_HCA", "",
                         "RDMA devices to use (NCCL syntax: mlx5_0:1,mlx5_1, ^exclude, =exact)", any_text());
const IntSetting kIbGidIndex("verbs", "UCCL_IB_GID_INDEX", "-1", "RoCE GID index (-1: pick the RoCE v2 IPv4 GID)",
                             int_in(-1, 255));
const IntSetting kIbQpsPerConnection("verbs", "UCCL_IB_QPS_PER_CONNECTION", "1",
                                     "RC queue pairs per peer; large messages are striped", int_in(1, 64));
const IntSetting kIbTimeout("verbs", "UCCL_IB_TIMEOUT", "18", "IB ack timeout exponent (4.096us * 2^value)",
                            int_in(0, 31));
const IntSetting kIbRetryCnt("verbs", "UCCL_IB_RETRY_CNT", "7", "IB transport retry count", int_in(0, 7));
const IntSetting kIbTc("verbs", "UCCL_IB_TC", "0", "IB traffic class", int_in(0, 255));
const IntSetting kIbSl("verbs", "UCCL_IB_SL", "0", "IB service level", int_in(0, 15));
const TextSetting kVerbsStripe("verbs", "UCCL_VERBS_STRIPE", "adaptive",
                               "how a large message is spread over a connection's HCA ports: adaptive (chunks go to "
                               "the port with the fewest bytes posted and not yet completed, so a slow or busy port "
                               "carries less) or static (cut by the ports' rated speeds); the receiver decides",
                               one_of({"adaptive", "static"}));
const BytesSetting kVerbsStripeChunkBytes("verbs", "UCCL_VERBS_STRIPE_CHUNK_BYTES", "256K",
                                          "adaptive striping: the RDMA write handed to one port at a time",
                                          bytes_at_least(kStripeAlign));
const BytesSetting kVerbsStripeInflightBytes("verbs", "UCCL_VERBS_STRIPE_INFLIGHT_BYTES", "1M",
                                             "adaptive striping: a port gets its next chunk while less than this is "
                                             "posted to it and not yet completed",
                                             bytes_at_least(1));

namespace {

// UCCL_IB_HCA for this rank (issue 18 rails): a per-local-rank list ("=mlx5_0;=mlx5_1") gives
// the local rank's entry; without one, when several ACTIVE ports of similar speed are selected,
// the rank's rail port (closest to its accelerator in the PCIe tree, else by local rank:
// topology/rails.h) as "=device:port".
std::string rank_hca_spec() {
  const std::string listed = rail_ifname_spec(kIbHca.get(), launcher_local_rank(), nullptr, "UCCL_IB_HCA");
  if (listed != kIbHca.get()) return listed;
  auto ports = enumerate_ports(listed, kIbGidIndex.get());
  if (!ports.ok()) return listed;
  std::vector<RailCandidate> cands;
  std::vector<const VerbsNic*> nics;
  for (const PortInfo& p : ports.value()) {
    if (!p.nic.active) continue;
    cands.push_back({p.nic.name, p.nic.fabric, p.nic.gbps, "/sys/class/infiniband/" + p.nic.device + "/device"});
    nics.push_back(&p.nic);
  }
  const RailPick pick = pick_rail(cands, launcher_local_rank(), launcher_local_size(), accelerator_pci());
  if (pick.index < 0) return listed;
  const VerbsNic& n = *nics[pick.index];
  UCCL_INFO("verbs: rail port %s (%s)", n.name.c_str(), pick.why.c_str());
  return "=" + n.device + ":" + std::to_string(n.port);
}

}  // namespace

VerbsOptions VerbsOptions::from_config() {
  VerbsOptions o;
  o.hca = rank_hca_spec();
  o.gid_index = kIbGidIndex.get();
  o.qps_per_connection = kIbQpsPerConnection.get();
  o.timeout = kIbTimeout.get();
  o.retry_cnt = kIbRetryCnt.get();
  o.tc = kIbTc.get();
  o.sl = kIbSl.get();
  o.stripe = kStripeNetworks.get() != "off";
  o.stripe_adaptive = kVerbsStripe.get() == "adaptive";
  o.stripe_chunk_bytes = kVerbsStripeChunkBytes.get();
  o.stripe_inflight_bytes = kVerbsStripeInflightBytes.get();
  return o;
}

std::unique_ptr<Transport> make_verbs_transport() { return make_verbs_transport(VerbsOptions::from_config()); }

std::unique_ptr<Transport> make_verbs_transport(const VerbsOptions& options) {
  return std::unique_ptr<Transport>(new VerbsTransport(options));
}

bool verbs_available(std::string* why) { return verbs_available(rank_hca_spec(), why); }

bool verbs_available(const std::string& hca_spec, std::string* why) {
  auto ports = enumerate_ports(hca_spec, kIbGidIndex.get());
  if (!ports.ok()) {
    if (why) *why = ports.status().message();
    return false;
  }
  for (const PortInfo& p : ports.value())
    if (p.nic.active) return true;
  if (why) *why = "verbs unavailable: no selected port is ACTIVE";
  return false;
}

std::vector<VerbsNic> list_verbs_nics() { return list_verbs_nics(rank_hca_spec()); }

std::vector<VerbsNic> list_verbs_nics(const std::string& hca_spec) {
  std::vector<VerbsNic> out;
  auto ports = enumerate_ports(hca_spec, kIbGidIndex.get());
  if (ports.ok())
    for (const PortInfo& p : ports.value()) out.push_back(p.nic);
  return out;
}

VerbsMrCacheStats verbs_mr_cache_stats() {
  VerbsMrCacheStats total;
  for (auto& d : open_verbs_devices()) {
    VerbsMrCacheStats s = d->mr_cache().stats();
    total.registrations += s.registrations;
    total.hits += s.hits;
    total.stale += s.stale;
    total.deregistrations += s.deregistrations;
    total.entries += s.entries;
    total.page_check = total.page_check || s.page_check;
  }
  return total;
}

void verbs_mr_cache_invalidate(const void* addr, size_t len) {
  for (auto& d : open_verbs_devices()) d->mr_cache().invalidate(addr, len);
}

void verbs_mr_cache_set_page_check_for_testing(bool on) {
  for (auto& d : open_verbs_devices()) d->mr_cache().set_page_check_for_testing(on);
}

void verbs_set_library_for_testing(const std::string& soname) {
  ibverbs_set_library_for_testing(soname.empty() ? "libibverbs.so.1" : soname);
}

}  // namespace uccl
