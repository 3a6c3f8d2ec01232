// The RDMA verbs transport (InfiniBand and RoCE): public entry points.
//
// This header does not include <infiniband/verbs.h>, so the topology code, the core and tests
// can use it without rdma-core headers. The sources behind it are compiled only when the build
// found verbs.h (UCCL_HAVE_VERBS == 1); callers guard their use with `#if UCCL_HAVE_VERBS`.
// At run time libibverbs is dlopen'ed: without rdma-core or without devices everything here
// answers "unavailable" (verbs_available() false, start_connect/accept kNotSupported).
//
// How a connection works (details in verbs_endpoint.h and verbs_wire.h):
//  * The core's one authenticated TCP socket stays open as a liveness channel only (peer death
//    = HUP); no payload ever crosses it. The offer/answer strings carry QP numbers, PSNs,
//    LID/GID, MTU and the credit mailbox address/rkey.
//  * UCCL_IB_QPS_PER_CONNECTION RC QPs. QP 0 carries the ordered control stream (SEND/RECV
//    into pre-posted registered bounce buffers, credit flow control). Messages up to the
//    eager limit travel inside a control message (Envelope + bytes + payload).
//  * Larger messages use a receiver-driven rendezvous: the receiver registers dst (cached) and
//    sends a clear-to-send with address/rkey; the sender RDMA-WRITEs, striped across the QPs,
//    the last write per QP with an immediate. Reduce receives target a registered scratch
//    region, then reduce into dst.
//  * With several usable ports (UCCL_IB_HCA selects them, no rail port picked), the connection
//    has a lane (channel) per pair of ports on one fabric and large messages are cut over the
//    lanes (verbs_lanes.h): by default adaptively, in chunks that go to the lane with the
//    fewest bytes on their way (UCCL_VERBS_STRIPE); lane 0 carries the control stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "transports/transport.h"

namespace uccl {

// The verbs settings (declared in verbs_transport.cc; defaults and meanings there).
extern const TextSetting kIbHca;
extern const IntSetting kIbGidIndex, kIbQpsPerConnection, kIbTimeout, kIbRetryCnt, kIbTc, kIbSl;
extern const TextSetting kVerbsStripe;
extern const BytesSetting kVerbsStripeChunkBytes, kVerbsStripeInflightBytes;

// Knobs of one verbs transport instance. make_verbs_transport() fills them from the settings
// (from_config()); fields start at the settings' defaults.
struct VerbsOptions {
  std::string hca = kIbHca.default_value();  // UCCL_IB_HCA (NCCL syntax); the first matching ACTIVE port is used
  int gid_index = kIbGidIndex.default_value();  // -1 picks the RoCE v2 IPv4-mapped GID
  int qps_per_connection = kIbQpsPerConnection.default_value();
  int timeout = kIbTimeout.default_value();  // ack timeout exponent: 4.096us * 2^timeout
  int retry_cnt = kIbRetryCnt.default_value();
  int tc = kIbTc.default_value();  // RoCE traffic class
  int sl = kIbSl.default_value();
  // Stripe large messages over every ACTIVE port `hca` selects that the peer has a port beside
  // (transports/verbs/verbs_lanes.h); false (UCCL_STRIPE_NETWORKS=off): the first port only.
  bool stripe = true;
  // How a message striped over several lanes is spread (UCCL_VERBS_STRIPE, verbs_lanes.h): in
  // chunks of stripe_chunk_bytes, each to the lane with the fewest bytes posted and not yet
  // completed while below stripe_inflight_bytes (adaptive), or cut by the ports' rates (false).
  // Decided by the receiver of each message.
  bool stripe_adaptive = kVerbsStripe.default_value() == "adaptive";
  size_t stripe_chunk_bytes = kVerbsStripeChunkBytes.default_value();
  size_t stripe_inflight_bytes = kVerbsStripeInflightBytes.default_value();
  // Tests: lane `fail_lane_for_testing` (>= 1) fails to connect on this side (-1: none).
  int fail_lane_for_testing = -1;
  static VerbsOptions from_config();
};

std::unique_ptr<Transport> make_verbs_transport();
std::unique_ptr<Transport> make_verbs_transport(const VerbsOptions& options);

// True when libibverbs loads and UCCL_IB_HCA selects at least one ACTIVE port. Otherwise false
// with the reason ("cannot load libibverbs.so.1 ...", "no RDMA devices", "UCCL_IB_HCA=... matches
// none of: rxe0:1 ...").
bool verbs_available(std::string* why);
bool verbs_available(const std::string& hca_spec, std::string* why);

// One local RDMA port, for the topology code (PeerInfo's NicInfo is filled from this).
struct VerbsNic {
  std::string name;        // "mlx5_0:1", "rxe0:1"
  std::string device;      // "rxe0"
  int port = 1;
  std::string link_layer;  // "ib" or "roce"
  bool active = false;     // port state ACTIVE
  std::string address;     // IB: "lid 0x12"; RoCE: the GID used ("::ffff:10.77.0.1")
  int gid_index = -1;      // RoCE: the GID index the transport would use
  int mtu = 0;             // active MTU in bytes
  double gbps = 0;         // rated link speed from active_speed x active_width
  std::string fabric;      // RoCE: "roce:10.77.0.0/24" (subnet of the GID's IPv4);
                           // IB: "ib:fe80:0000:0000:0000" (GID subnet prefix)
  std::string netdev;      // RoCE: the Ethernet interface ("veth0"), "" for IB
};

// Ports selected by UCCL_IB_HCA (all ports when it is empty); empty when verbs is unavailable.
std::vector<VerbsNic> list_verbs_nics();
std::vector<VerbsNic> list_verbs_nics(const std::string& hca_spec);

// Memory registration cache (process wide, one per device): see verbs_mr_cache.h.
struct VerbsMrCacheStats {
  uint64_t registrations = 0;    // ibv_reg_mr calls for user buffers
  uint64_t hits = 0;             // lookups served by a cached registration
  uint64_t stale = 0;            // cached registrations found stale (buffer freed + reallocated)
  uint64_t deregistrations = 0;
  uint64_t entries = 0;          // registrations currently cached
  bool page_check = false;       // stale detection by page identity is available (see .h)
};
VerbsMrCacheStats verbs_mr_cache_stats();
// Allocator hook: the memory [addr, addr+len) is about to be freed or remapped; drop cached
// registrations overlapping it (those in use by a pending request are dropped when released).
void verbs_mr_cache_invalidate(const void* addr, size_t len);

// Test hooks: simulate a host without rdma-core by dlopening another name ("" restores);
// switch the page-identity check of open caches off (the unprivileged mode) or back on.
void verbs_set_library_for_testing(const std::string& soname);
void verbs_mr_cache_set_page_check_for_testing(bool on);

}  // namespace uccl
