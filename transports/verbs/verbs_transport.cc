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

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "topology/rails.h"
#include "transports/verbs/verbs_channel.h"
#include "transports/verbs/verbs_device.h"
#include "transports/verbs/verbs_endpoint.h"
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

class VerbsPendingConnect : public PendingConnect {
 public:
  VerbsPendingConnect(std::unique_ptr<VerbsChannel> ch, const VerbsOptions& o, const PeerContext& peer)
      : ch_(std::move(ch)), options_(o), peer_(peer) {}

  std::string offer() override { return ch_->local_info().serialize(); }

  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    int fd = take_liveness_fd(fds);
    auto fail = [&](const Status& s) -> Result<Endpoint*> {
      close_fd(fd);
      return s.with_context("verbs connect to " + peer_.describe());
    };
    if (fd < 0) return fail(Internal("verbs finish() needs one liveness socket"));
    if (!ch_) return fail(Internal("verbs finish() called twice"));
    auto remote = VerbsConnInfo::parse(answer);
    if (!remote.ok()) return fail(remote.status());
    if (remote.value().qpn.size() > ch_->nqp()) return fail(Internal("the answer has more QPs than offered"));
    ch_->trim(remote.value().qpn.size());
    Status s = ch_->connect(remote.value(), options_);
    if (!s.ok()) return fail(s);
    return static_cast<Endpoint*>(new VerbsEndpoint(std::move(ch_), remote.value(), peer_, fd, true));
  }

 private:
  std::unique_ptr<VerbsChannel> ch_;
  VerbsOptions options_;
  PeerContext peer_;
};

class VerbsTransport : public Transport {
 public:
  explicit VerbsTransport(const VerbsOptions& o) : options_(o) {}
  TransportKind kind() const override { return TransportKind::kVerbs; }
  int sockets_per_connection() const override { return 1; }

  Result<PendingConnect*> start_connect(const PeerContext& peer) override {
    auto dev = device();
    if (!dev.ok()) return dev.status();
    auto ch = VerbsChannel::create(dev.value(), options_.qps_per_connection);
    if (!ch.ok()) return ch.status().with_context("verbs connect to " + peer.describe());
    return static_cast<PendingConnect*>(new VerbsPendingConnect(ch.take(), options_, peer));
  }

  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    // On failure the fds stay the core's: it answers the refusal on them and closes them.
    auto fail = [&](const Status& s) -> Result<Endpoint*> { return s.with_context("verbs accept from " + peer.describe()); };
    if (fds.empty()) return fail(Internal("verbs accept() needs one liveness socket"));
    auto dev = device();
    if (!dev.ok()) return fail(dev.status());
    auto remote = VerbsConnInfo::parse(offer);
    if (!remote.ok()) return fail(remote.status());
    int nqp = std::min<int>(static_cast<int>(remote.value().qpn.size()), std::max(1, options_.qps_per_connection));
    auto ch = VerbsChannel::create(dev.value(), nqp);
    if (!ch.ok()) return fail(ch.status());
    Status s = ch.value()->connect(remote.value(), options_);
    if (!s.ok()) return fail(s);
    *answer = ch.value()->local_info().serialize();
    const int fd = take_liveness_fd(fds);
    return static_cast<Endpoint*>(new VerbsEndpoint(ch.take(), remote.value(), peer, fd, false));
  }

 private:
  // Opened on first use, so constructing a transport never fails and costs nothing.
  Result<std::shared_ptr<VerbsDevice>> device() {
    if (device_) return device_;
    auto d = VerbsDevice::open(options_);
    if (!d.ok()) return d.status();
    device_ = d.value();
    return device_;
  }

  VerbsOptions options_;
  std::shared_ptr<VerbsDevice> device_;
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
