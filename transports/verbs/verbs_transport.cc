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
    int fd = take_liveness_fd(fds);
    auto fail = [&](const Status& s) -> Result<Endpoint*> {
      close_fd(fd);
      return s.with_context("verbs accept from " + peer.describe());
    };
    if (fd < 0) return fail(Internal("verbs accept() needs one liveness socket"));
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

VerbsOptions VerbsOptions::from_config() {
  const Config& c = config();
  VerbsOptions o;
  o.hca = c.ib_hca;
  o.gid_index = c.ib_gid_index;
  o.qps_per_connection = c.ib_qps_per_connection;
  o.timeout = c.ib_timeout;
  o.retry_cnt = c.ib_retry_cnt;
  o.tc = c.ib_tc;
  o.sl = c.ib_sl;
  return o;
}

std::unique_ptr<Transport> make_verbs_transport() { return make_verbs_transport(VerbsOptions::from_config()); }

std::unique_ptr<Transport> make_verbs_transport(const VerbsOptions& options) {
  return std::unique_ptr<Transport>(new VerbsTransport(options));
}

bool verbs_available(std::string* why) { return verbs_available(config().ib_hca, why); }

bool verbs_available(const std::string& hca_spec, std::string* why) {
  auto ports = enumerate_ports(hca_spec, config().ib_gid_index);
  if (!ports.ok()) {
    if (why) *why = ports.status().message();
    return false;
  }
  for (const PortInfo& p : ports.value())
    if (p.nic.active) return true;
  if (why) *why = "verbs unavailable: no selected port is ACTIVE";
  return false;
}

std::vector<VerbsNic> list_verbs_nics() { return list_verbs_nics(config().ib_hca); }

std::vector<VerbsNic> list_verbs_nics(const std::string& hca_spec) {
  std::vector<VerbsNic> out;
  auto ports = enumerate_ports(hca_spec, config().ib_gid_index);
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
