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
// Lane 0 carries the control stream (its QP 0) and every message below kMinLaneBytes. A larger
// rendezvous message is spread over the lanes in one of two ways, chosen by the receiver
// (UCCL_VERBS_STRIPE; its CTS says which):
//  * static: cut in proportion to the lanes' rates (weighted_parts, the helper tcp cuts with:
//    transports/stripe.h), then each lane's share over that lane's QPs (StripePlan); the last
//    write on each used QP carries the immediate, and the receiver computes the same cut to
//    know which QPs deliver one (lane_pieces, imm_mask).
//  * adaptive: cut into chunks, each posted to the lane with the fewest bytes posted but not yet
//    completed, while that is below a limit (StripeLoad, least_committed_lane like tcp), so a
//    port slower than it says or busy with other traffic takes fewer. The receiver cannot know
//    the cut, so the sender closes every QP of the connection with an immediate after the
//    message's last chunk (the last chunk itself on its QP, a zero-length write with immediate
//    on the others: AdaptiveCut). RC delivers a QP's writes in order, so a QP's immediate
//    means all its chunks have landed; the receiver waits for one immediate per QP
//    (expected_imms), exactly as in the static case, and needs no per-chunk record.
// QPs are numbered across the connection: lane 0's first, then lane 1's...
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
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

// Whether a rendezvous message of `bytes` over `lanes` lanes is striped adaptively when the
// receiver asks for it: several lanes and at least kMinLaneBytes (smaller ones stay on lane 0,
// cut as before).
inline bool stripes_adaptively(size_t bytes, size_t lanes) { return lanes > 1 && bytes >= kMinLaneBytes; }
// The receiver's bookkeeping: bit q = QP q delivers one immediate for the message. Adaptive:
// every QP of the connection (the sender closes each); static: the QPs lane_pieces() uses.
uint64_t expected_imms(size_t bytes, bool adaptive, const std::vector<double>& weights, const std::vector<size_t>& qps);

// Adaptive striping, the sender's bookkeeping over one connection: the bytes of each RDMA
// write posted and not yet completed, per QP (a FIFO: RC completes a QP's signaled writes in
// order) and per lane. Every data write goes through it, static ones too, so that a lane busy
// with earlier messages looks busy.
class StripeLoad {
 public:
  StripeLoad() = default;
  explicit StripeLoad(const std::vector<size_t>& qps);  // QPs per lane
  // The QP (across the connection) for the next chunk: on the lane with the fewest bytes in
  // flight (least_committed_lane) while they are below `limit`, its QP with the fewest.
  // SIZE_MAX when every lane holds `limit` or more.
  size_t pick(size_t limit) const;
  void posted(size_t qp, size_t bytes);
  void completed(size_t qp);  // the QP's oldest write completed
  size_t lane_bytes(size_t lane) const { return lane_load_[lane]; }
  size_t qp_bytes(size_t qp) const { return qp_load_[qp]; }
  size_t writes(size_t qp) const { return fifo_[qp].size(); }

 private:
  std::vector<size_t> qp_lane_, lane_first_, lane_qps_, lane_load_, qp_load_;
  mutable std::vector<size_t> limits_;  // pick()'s per-lane limit, kept so a chunk allocates nothing
  std::vector<std::deque<size_t>> fifo_;
};

// Adaptive striping, one message on the sender's side: its chunks in order (offset 0, chunk,
// 2 chunk, ...; the last takes the rest), each on the QP the caller picked, then the closing
// immediates. Sequence: while data_left(): next_chunk(qp, lane); then while closing(&p): post p.
struct AdaptiveCut {
  size_t bytes = 0, chunk = 0, sent = 0;
  uint64_t owe_imm = 0;  // QPs whose immediate is still to be posted
  // `chunk` is rounded down to kStripeAlign (at least one page) and capped at kMaxWrite.
  void start(size_t bytes, size_t chunk, size_t total_qps);
  bool data_left() const { return sent < bytes; }
  bool last_chunk() const { return bytes - sent <= chunk; }  // the next chunk is the last
  // The next chunk, to be written on `qp` of `lane`; the message's last chunk carries its QP's
  // immediate.
  LanePiece next_chunk(size_t qp, size_t lane);
  // After the data: the next closing write (zero bytes, with immediate) for `qp_lane`'s QPs
  // still owing one, lowest first. False when none is left (or data is still to go).
  bool closing(const std::vector<size_t>& qp_lane, LanePiece* out) const;
  void closed(size_t qp) { owe_imm &= ~(uint64_t(1) << qp); }
  bool done() const { return sent == bytes && owe_imm == 0; }
};

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
