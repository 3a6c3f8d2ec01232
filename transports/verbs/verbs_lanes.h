// Striping one verbs connection over several HCA ports (issue 18, rails item 2): which local
// port carries which lane, and how a rendezvous message is cut over the lanes' QPs. Free of
// verbs.h, so that the arithmetic is unit-tested on any host (tests/cpp/verbs_lanes_test.cc).
//
// A lane is a pair of ports, one per rank, on the same fabric (the RoCE subnet or the IB subnet
// prefix), each port in at most one lane of the connection. Why ports and not subnets as tcp's
// lanes: every HCA port is its own wire into the fabric, and the ports of a rail-optimised IB
// host all share one subnet prefix. The active side offers a channel (QPs) on each port it may
// use (UCCL_IB_HCA for this rank, the rail port alone when a rail was picked); the passive side
// pairs each offered lane with one of its own ports (match_lanes) and answers for those; the
// active side's first control message (READY) names the lanes it connected, so a lane that
// fails on either side leaves the others working (describe() says which was left out).
//
// Lane 0 carries the control stream (its QP 0) and every message below kMinLaneBytes; a larger
// rendezvous message is cut over the lanes in proportion to their rates (weighted_parts, the
// helper tcp cuts with: transports/stripe.h), then each lane's share over that lane's QPs as
// before (StripePlan). QPs are numbered across the connection: lane 0's first, then lane 1's...
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace uccl {

constexpr size_t kMinStripe = 64 << 10;        // smaller messages stay on one QP
constexpr size_t kMaxWrite = size_t(1) << 30;  // bytes per RDMA write (IB allows 2 GiB)
constexpr size_t kMinLaneBytes = 256 << 10;    // smaller messages stay on lane 0
constexpr size_t kMaxLanes = 8;                // ports one connection stripes over
constexpr size_t kMaxConnQps = 64;             // QPs of a connection, all lanes (a 64-bit mask)

// How one lane's share is cut: `pieces` writes of `stripe` bytes (the last shorter), piece p on
// the lane's QP p % nqp; the last piece on each QP carries the immediate. Both sides compute it.
struct StripePlan {
  size_t stripe = 0;
  size_t pieces = 0;
  size_t qps_used = 0;
  static StripePlan make(size_t bytes, size_t nqp);
};

// One RDMA write of a rendezvous message.
struct LanePiece {
  size_t lane = 0;
  size_t qp = 0;  // across the connection (lane 0's QPs first)
  size_t offset = 0, bytes = 0;
  bool with_imm = false;  // the last write on its QP
};

// The writes of a message of `bytes` over lanes of `weights` (one per lane) and `qps` QPs each,
// in posting order (the lanes' first pieces first, so that every lane starts at once). One lane,
// or fewer than kMinLaneBytes: everything on lane 0. Empty for 0 bytes.
std::vector<LanePiece> lane_pieces(size_t bytes, const std::vector<double>& weights, const std::vector<size_t>& qps);
// Bit q: QP q delivers an immediate for the message (what the receiver waits for).
uint64_t imm_mask(const std::vector<LanePiece>& pieces);

// A port as the matching sees it: one side's offer, or a local port.
struct LanePort {
  std::string name;        // "rxe1:1"
  std::string link_layer;  // "ib" | "roce"
  std::string fabric;      // "roce:10.77.0.0/24"
  std::string address;     // the GID / LID text: two ports with one address are one wire
  double gbps = 0;         // 0 unknown
};
// The rate of a lane between two ports: the slower one's, or the known one's.
double lane_rate(const LanePort& a, const LanePort& b);
// For each offered lane, the index of the local port it pairs with, or -1: same link layer and
// fabric, each local port at most once, a port with another address than the offered one
// preferred (two ranks of one host then cross the wire instead of looping back), then in local
// order. Lanes after the first whose rate is below half of lane 0's are left out (-1), and at
// most kMaxLanes lanes are paired.
std::vector<int> match_lanes(const std::vector<LanePort>& offered, const std::vector<LanePort>& local);

}  // namespace uccl
