// ShmTransport: setup of a shm connection from the offer/answer strings the core carries.
//
//   offer  (active):  "uccl-shm 1 name=/uccl-12-ab.. total=.. ring=.. pid=12 cma=1 probe=0x.. value=0x.."
//   answer (passive): "uccl-shm 1 pid=34 cma=1 probe=0x.. value=0x.."
// `probe`/`value` name a word in the sender of the string that the other side reads with
// process_vm_readv; each reader stores its verdict in the segment (SegmentControl::cma_verdict).
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "base/config.h"
#include "base/log.h"
#include "transports/shm/shm_cma.h"
#include "transports/shm/shm_endpoint.h"
#include "transports/shm/shm_transport.h"

namespace uccl {
namespace {

using shm::Segment;

constexpr const char* kMagic = "uccl-shm";
constexpr int kProtocol = 1;

using Fields = std::map<std::string, std::string>;

Result<Fields> parse_fields(const std::string& text, const char* what) {
  std::istringstream in(text);
  std::string magic;
  int version = 0;
  in >> magic >> version;
  if (magic != kMagic || version != kProtocol)
    return Status(Code::kRemoteError, std::string("shm ") + what + " has an unknown format: '" + text + "'");
  Fields f;
  std::string item;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq != std::string::npos) f[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return f;
}

uint64_t field_u64(const Fields& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 0);
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

// The liveness socket: exactly one is expected; extras are closed (we own them).
int take_liveness_fd(const std::vector<int>& fds) {
  for (size_t i = 1; i < fds.size(); ++i) close(fds[i]);
  return fds.empty() ? -1 : fds[0];
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// Reader side of the probe. Reading the peer's random word proves two things: CMA works, and
// `pid` really is the peer (worth a pidfd for liveness even when CMA is switched off).
bool probe_peer(const Fields& f, pid_t pid) {
  return shm::cma_probe(pid, field_u64(f, "probe"), field_u64(f, "value"));
}
// The verdict stored in the segment for the writer: CMA for this direction, yes (1) or no (2).
uint32_t cma_verdict(bool probe_ok, bool allowed_here, const Fields& f) {
  return probe_ok && allowed_here && field_u64(f, "cma") == 1 ? 1 : 2;
}

std::string probe_fields(bool cma) {
  return std::string(" cma=") + (cma ? "1" : "0") + " probe=" + hex(shm::cma_probe_address()) +
         " value=" + hex(shm::cma_probe_value());
}

class ShmPendingConnect final : public PendingConnect {
 public:
  ShmPendingConnect(const PeerContext& peer, Segment seg, const ShmOptions& opt)
      : peer_(peer), segment_(std::move(seg)), opt_(opt) {}

  std::string offer() override {
    return std::string(kMagic) + " " + std::to_string(kProtocol) + " name=" + segment_.name() +
           " total=" + std::to_string(segment_.total_bytes()) + " ring=" + std::to_string(segment_.ring_bytes()) +
           " pid=" + std::to_string(getpid()) + probe_fields(opt_.cma);
  }

  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    segment_.unlink();  // the passive side has it mapped (or failed): the name is no longer needed
    Result<Fields> f = parse_fields(answer, "answer");
    if (!f.ok() || fds.empty()) {
      close_all(fds);
      return f.ok() ? Internal("shm finish() needs one liveness socket") : f.status();
    }
    const pid_t peer_pid = static_cast<pid_t>(field_u64(f.value(), "pid"));
    const bool probe_ok = probe_peer(f.value(), peer_pid);
    segment_.control()->cma_verdict[1].store(cma_verdict(probe_ok, opt_.cma, f.value()), std::memory_order_release);
    shm::ShmEndpointParams p;
    p.peer = peer_;
    p.segment = std::move(segment_);
    p.side = 0;
    p.liveness_fd = take_liveness_fd(fds);
    p.peer_pid = peer_pid;
    p.peer_pid_verified = probe_ok;
    p.options = opt_;
    auto* ep = new shm::ShmEndpoint(std::move(p));
    UCCL_INFO("shm: connected to %s: %s", peer_.describe().c_str(), ep->describe().c_str());
    return static_cast<Endpoint*>(ep);
  }

 private:
  PeerContext peer_;
  Segment segment_;  // unlinks and unmaps on destruction if finish() never ran
  ShmOptions opt_;
};

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const ShmOptions& opt) : opt_(opt) {
    if (opt_.piece_bytes < 4096) opt_.piece_bytes = 4096;
    opt_.piece_bytes &= ~static_cast<size_t>(shm::kLine - 1);
    opt_.ring_bytes = shm::effective_ring_bytes(opt_.ring_bytes, opt_.piece_bytes);
    opt_.cma_chunk_bytes = std::max<size_t>(opt_.cma_chunk_bytes, 4096);
    opt_.push_chunk_bytes = std::max<size_t>(opt_.push_chunk_bytes, 4096);
    opt_.cma_bounce_bytes = std::max<size_t>(opt_.cma_bounce_bytes, 4096) & ~static_cast<size_t>(shm::kLine - 1);
  }
  TransportKind kind() const override { return TransportKind::kShm; }

  Result<PendingConnect*> start_connect(const PeerContext& peer) override {
    if (opt_.cma) shm::cma_allow_peers();  // before the offer: the peer probes us in accept()
    static std::once_flag janitor;
    std::call_once(janitor, [] {
      if (int n = shm::remove_stale_segments()) UCCL_INFO("shm: removed %d stale segment(s) from /dev/shm", n);
    });
    Result<Segment> seg = Segment::create(opt_.ring_bytes);
    if (!seg.ok()) return seg.status();
    return static_cast<PendingConnect*>(new ShmPendingConnect(peer, seg.take(), opt_));
  }

  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    Result<Fields> f = parse_fields(offer, "offer");
    if (!f.ok() || fds.empty()) {
      close_all(fds);
      return f.ok() ? Internal("shm accept() needs one liveness socket") : f.status();
    }
    const Fields& o = f.value();
    auto name = o.find("name");
    Result<Segment> seg = Segment::open(name == o.end() ? "" : name->second, field_u64(o, "total"), field_u64(o, "ring"));
    if (!seg.ok()) {
      close_all(fds);
      return seg.status().with_context("shm setup with " + peer.describe());
    }
    Segment segment = seg.take();
    segment.unlink();  // both sides unlink, whoever comes first wins
    if (opt_.cma) shm::cma_allow_peers();  // before the answer: the peer probes us in finish()
    const pid_t peer_pid = static_cast<pid_t>(field_u64(o, "pid"));
    const bool probe_ok = probe_peer(o, peer_pid);
    segment.control()->cma_verdict[0].store(cma_verdict(probe_ok, opt_.cma, o), std::memory_order_release);
    *answer = std::string(kMagic) + " " + std::to_string(kProtocol) + " pid=" + std::to_string(getpid()) +
              probe_fields(opt_.cma);
    shm::ShmEndpointParams p;
    p.peer = peer;
    p.segment = std::move(segment);
    p.side = 1;
    p.liveness_fd = take_liveness_fd(fds);
    p.peer_pid = peer_pid;
    p.peer_pid_verified = probe_ok;
    p.options = opt_;
    auto* ep = new shm::ShmEndpoint(std::move(p));
    UCCL_INFO("shm: accepted %s: %s", peer.describe().c_str(), ep->describe().c_str());
    return static_cast<Endpoint*>(ep);
  }

 private:
  ShmOptions opt_;
};

}  // namespace

ShmOptions ShmOptions::from_config() {
  const Config& c = config();
  ShmOptions o;
  o.ring_bytes = c.shm_ring_bytes;
  o.cma = c.shm_cma;
  o.cma_min_bytes = c.shm_cma_min_bytes;
  o.cma_max_bytes = c.shm_cma_max_bytes;
  o.cma_push = c.shm_cma_push;
  return o;
}

std::unique_ptr<Transport> make_shm_transport() { return make_shm_transport(ShmOptions::from_config()); }

std::unique_ptr<Transport> make_shm_transport(const ShmOptions& options) {
  return std::make_unique<ShmTransport>(options);
}

}  // namespace uccl
