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

// The endpoint of either side, once the peer's pid is probed; `verb` says which side in the log.
Endpoint* make_endpoint(const PeerContext& peer, Segment segment, int side, const std::vector<int>& fds, pid_t peer_pid,
                        bool probe_ok, const ShmOptions& opt, const char* verb) {
  shm::ShmEndpointParams p;
  p.peer = peer;
  p.segment = std::move(segment);
  p.side = side;
  p.liveness_fd = take_liveness_fd(fds);
  p.peer_pid = peer_pid;
  p.peer_pid_verified = probe_ok;
  p.options = opt;
  auto* ep = new shm::ShmEndpoint(std::move(p));
  UCCL_INFO("shm: %s %s: %s", verb, peer.describe().c_str(), ep->describe().c_str());
  return ep;
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
    return make_endpoint(peer_, std::move(segment_), 0, fds, peer_pid, probe_ok, opt_, "connected to");
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
    opt_.push_min_bytes = std::min(opt_.push_min_bytes, opt_.cma_min_bytes);  // final receives: never later
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
    // On failure the fds stay the core's: it answers the refusal on them and closes them.
    Result<Fields> f = parse_fields(offer, "offer");
    if (!f.ok() || fds.empty()) return f.ok() ? Internal("shm accept() needs one liveness socket") : f.status();
    const Fields& o = f.value();
    auto name = o.find("name");
    Result<Segment> seg = Segment::open(name == o.end() ? "" : name->second, field_u64(o, "total"), field_u64(o, "ring"));
    if (!seg.ok()) return seg.status().with_context("shm setup with " + peer.describe());
    Segment segment = seg.take();
    segment.unlink();  // both sides unlink, whoever comes first wins
    if (opt_.cma) shm::cma_allow_peers();  // before the answer: the peer probes us in finish()
    const pid_t peer_pid = static_cast<pid_t>(field_u64(o, "pid"));
    const bool probe_ok = probe_peer(o, peer_pid);
    segment.control()->cma_verdict[0].store(cma_verdict(probe_ok, opt_.cma, o), std::memory_order_release);
    *answer = std::string(kMagic) + " " + std::to_string(kProtocol) + " pid=" + std::to_string(getpid()) +
              probe_fields(opt_.cma);
    return make_endpoint(peer, std::move(segment), 1, fds, peer_pid, probe_ok, opt_, "accepted");
  }

 private:
  ShmOptions opt_;
};

}  // namespace

const BytesSetting kShmRingBytes("shm", "UCCL_SHM_RING_BYTES", "4M",
                                 "size of each shared-memory ring (one per direction and peer)", bytes_at_least(1));
const BoolSetting kShmCma("shm", "UCCL_SHM_CMA", "1",
                          "single-copy cross-memory attach (process_vm_readv) for large shm messages; the process "
                          "then allows ptrace-attach by same-user processes (PR_SET_PTRACER_ANY)",
                          boolean());
// 128K: below ~1M the two-copy ring lost to a single process_vm_readv by 2x on the 2-core VM
// (all_gather 1 MiB: 79 -> 38 us, Open MPI 43-50 us). Pulling data the sender had just
// written kept the ring ahead below 256K (in-place all_reduce); since exchange steps push
// (the sender copies from its own cache), 128K wins too: all_reduce 256 KiB 28 -> 18 us,
// all_gather 256 KiB in place 14.6 -> 6.7 us. 64K lost (a direct all_reduce 64 KiB 13 -> 19 us).
const BytesSetting kShmCmaMinBytes("shm", "UCCL_SHM_CMA_MIN_BYTES", "128K",
                                   "shm messages at least this large use single-copy CMA", bytes_at_least(0));
// 16K: 2-rank all_gather of 64 KiB (32 KiB blocks) 4.79 -> 3.41 us with CMA from 16K in an
// earlier A/B (Open MPI 3.88), broadcast 64 KiB 4.47 -> 3.35; CMA for every message from 16K
// made all_reduce 64 KiB 11.1 -> 15.8 us, hence only final receives (see ShmOptions).
const BytesSetting kShmPushMinBytes("shm", "UCCL_SHM_PUSH_MIN_BYTES", "16K",
                                    "exchange-step shm messages into receives that are final output (all_gather, "
                                    "broadcast) are written by the sender (process_vm_writev) from this size; "
                                    "UCCL_SHM_CMA_MIN_BYTES applies to all others",
                                    bytes_at_least(1));
const BytesSetting kShmCmaMaxBytes("shm", "UCCL_SHM_CMA_MAX_BYTES", "16M",
                                   "one-way shm messages larger than this go through the ring again (memory-bound: "
                                   "both cores copy); a sender that receives in the same step keeps CMA",
                                   bytes_at_least(0));
const BoolSetting kShmCmaPush("shm", "UCCL_SHM_CMA_PUSH", "1",
                              "in exchange steps the sender writes large shm messages into the posted receive "
                              "(process_vm_writev) instead of the receiver pulling them: the sender reads its "
                              "just-written data from its own cache",
                              boolean());

ShmOptions ShmOptions::from_config() {
  ShmOptions o;
  o.ring_bytes = kShmRingBytes.get();
  o.cma = kShmCma.get();
  o.cma_min_bytes = kShmCmaMinBytes.get();
  o.cma_max_bytes = kShmCmaMaxBytes.get();
  o.cma_push = kShmCmaPush.get();
  o.push_min_bytes = kShmPushMinBytes.get();
  return o;
}

std::unique_ptr<Transport> make_shm_transport() { return make_shm_transport(ShmOptions::from_config()); }

std::unique_ptr<Transport> make_shm_transport(const ShmOptions& options) {
  return std::make_unique<ShmTransport>(options);
}

}  // namespace uccl
