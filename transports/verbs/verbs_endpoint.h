// VerbsEndpoint: the data path of one verbs connection (see transport.h for the contract).
//
// Non-blocking contract, NCCL net-plugin style:
//  * post_send / post_recv only queue the request and assign it the next sequence number of its
//    direction; they never touch the wire and never block.
//  * progress() never blocks: it drains the completion queue, advances every queued request as
//    far as credits, send-queue space and the peer allow, completes requests strictly in posting
//    order per direction, and returns. "It will be called again."
//  * All completion polling happens inside progress(): no thread per QP or per endpoint.
//
// Protocol (wire format in verbs_wire.h):
//  * Messages of up to kEagerLimit bytes are copied into a registered send buffer and SENT on
//    QP 0 into one of the peer's pre-posted receive buffers (header = Envelope + size, then the
//    bytes). The receiver copies (or reduces) them into dst. A message that arrives before its
//    receive is posted keeps its buffer until then.
//  * Larger messages: rendezvous with RDMA WRITE into the receiver's buffer. The receiver sends a
//    clear-to-send (CTS: address, rkey, expected envelope and size) as soon as the receive is
//    posted; the sender checks the envelope and writes, striped over the QPs; the last write on
//    each QP carries an immediate (the sequence number), so the receiver knows the message has
//    landed when every QP it used has delivered its immediate: no acknowledgement round trip,
//    and a message never waits behind later messages' data queued on another QP.
//    Over several lanes (HCA ports) the receiver picks how (its CTS says, verbs_lanes.h): static,
//    the cut by the ports' rates; or adaptive (UCCL_VERBS_STRIPE, the default, when the peer can):
//    chunks posted one by one to the lane with the fewest bytes posted and not yet completed,
//    while below UCCL_VERBS_STRIPE_INFLIGHT_BYTES, then an immediate on every QP of the
//    connection (what the receiver waits for). Writes of one QP land in order, so its immediate
//    covers all its chunks; a port that is slow or busy completes its writes later and so
//    is handed fewer chunks, without any rate being measured.
//    Why WRITE and not READ: data moves one way with no round trip when receives are posted
//    early (collectives do), there is no max_rd_atomic limit, it is what ib_write_bw measures,
//    and on Soft-RoCE ib_read_bw reached 10 MB/s vs 37 MB/s for ib_write_bw at 1 MiB (measured
//    in the vm-run VM).
//  * A reduce receive points its CTS at a registered scratch buffer, then reduces into dst; small
//    ones reduce straight out of the receive buffer.
//  * Credits: we send a control message (or a write with immediate on QP 0, which consumes the
//    same receive queue) only while the peer has a posted buffer for it. Eager
//    messages (which may occupy a buffer until a receive is posted) leave kCreditReserve buffers
//    for the others, which the peer frees at once; so a CTS or an immediate always gets through.
//    Freed buffers are reported in every control header and, when traffic is one-sided, by an
//    RDMA write of the counter into our mailbox (no receive buffer needed: no credit deadlock).
//    On QPs 1.. the receiver reserves one zero-length receive per QP before it sends a CTS.
//  * Mismatches (other envelope or size) fail the receive with mismatch_error(); for a rendezvous
//    the sender learns it from the CTS and fails too, and nothing is written into dst.
//  * Failure: a completion error (retry exhaustion, remote access error, ...) or the liveness
//    socket closing fails every pending request with a Status naming device, port and peer
//    (and the peer's root cause, from the note it wrote on that socket before it closed);
//    the QPs move to ERR (no late writes into failed buffers) and later posts fail at once.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "transports/transport.h"
#include "transports/verbs/verbs_channel.h"
#include "transports/verbs/verbs_lanes.h"
#include "transports/verbs/verbs_mr_cache.h"

namespace uccl {

// One lane of a connection (verbs_lanes.h): a channel on one of our ports, paired with one of
// the peer's ports.
struct VerbsLane {
  std::unique_ptr<VerbsChannel> ch;
  uint32_t id = 0;          // its index in the active side's offer (both sides order lanes by it)
  std::string peer_device;  // the peer's port ("rxe1:1")
  double gbps = 0;          // the lane's rate (the slower port's), 0 unknown
};

class VerbsEndpoint : public Endpoint {
 public:
  // `active`: this side sent the offer; its first control message (READY) tells the passive
  // side that its QPs are in RTS. The passive side posts nothing before that (its own QPs were
  // ready before it answered), so no packet ever reaches a QP that is not yet in RTR. The
  // liveness socket carries one thing only: the note a failing side sends before closing.
  // `lanes`: lane 0 first (its QP 0 carries the control stream); with more than one, large
  // messages are striped over them (verbs_lanes.h). The passive side learns from READY which
  // of its lanes the active side connected and drops the others. `left_out`: lanes that did
  // not connect and why, for describe().
  // `options`: the striping knobs (stripe_adaptive, stripe_chunk_bytes, stripe_inflight_bytes).
  VerbsEndpoint(std::vector<VerbsLane> lanes, const VerbsConnInfo& remote, const PeerContext& peer, int liveness_fd,
                bool active, std::string left_out, const VerbsOptions& options);
  ~VerbsEndpoint() override;

  void post_send(SendRequest* r) override;
  void post_recv(RecvRequest* r) override;
  bool progress() override;
  bool has_pending() const override { return !sends_.empty() || !recvs_.empty(); }
  void fail_all(const Status& why) override;
  TransportKind kind() const override { return TransportKind::kVerbs; }
  std::string describe() const override;

 private:
  struct SendOp {
    SendRequest* req = nullptr;
    uint64_t seq = 0;
    bool eager = true;
    Status error;
    bool invalid = false;       // the request itself was bad: tell the receiver, fail locally
    bool rts_sent = false;
    bool have_cts = false;
    CtrlMsg cts;
    MrRef mr[kMaxLanes];        // the buffer's registration on each lane's port (its own PD)
    std::vector<LanePiece> pieces;  // static: the writes (computed once the CTS is accepted)
    size_t next_piece = 0;      // pieces posted
    bool adaptive = false;      // the CTS asked for adaptive striping: `cut` says what is posted
    AdaptiveCut cut;
    int writes_inflight = 0;
    bool final_posted = false;  // nothing left to post (EAGER, last write or DONE is out)
    bool finished = false;      // its completion arrived (or nothing is left to send)
  };
  struct Scratch {
    char* ptr = nullptr;
    size_t cap = 0;
    std::vector<ibv_mr*> mr;  // one per lane (each lane's port has its own PD)
    bool busy = false;
  };
  struct RecvOp {
    RecvRequest* req = nullptr;
    uint64_t seq = 0;
    bool rndv = false;
    Status error;
    bool invalid = false;
    bool cts_sent = false;
    uint64_t imm_wait = 0;        // bit q: the immediate of the last write on QP q is awaited
    bool reject_pending = false;  // a CTS with kFlagReject must still go out
    bool done = false;
    MrRef mr[kMaxLanes];
    Scratch* scratch = nullptr;
  };
  struct Stashed {  // a control message that arrived before its receive was posted
    CtrlMsg msg;
    int slot = -1;  // receive buffer still held (EAGER payload), -1 if released
  };

  // ---- verbs_endpoint.cc: life cycle, lanes, completions, liveness, failure
  void layout_lanes();
  void keep_lanes(uint64_t mask);
  void release_mrs(MrRef* mrs);
  void free_scratch(Scratch& s);
  uint32_t lane_rkey(const CtrlMsg& cts, size_t lane) const { return lane == 0 ? cts.rkey : cts.lane_rkey[lane - 1]; }
  void poll_completions(bool* moved);
  void poll_cq(VerbsChannel& ch, int* budget, bool* moved);
  void on_completion_error(const ibv_wc& wc);
  void check_liveness();
  void fatal(const Status& why);
  void finalize(bool* moved);
  Status post_ctrl(CtrlMsg m, const void* payload, size_t len, int64_t final_of_send);
  Status post_write(SendOp& op, const LanePiece& piece);
  void maybe_advertise_credits();
  bool can_post() const { return peer_ready_ && !peer_gone_ && !dead_; }
  bool ctrl_ok(bool may_hold) const;
  uint64_t credits() const;
  void repost(uint32_t slot);

  // ---- verbs_endpoint_proto.cc: the protocol state machines
  void on_ctrl(uint32_t slot, uint32_t byte_len);
  void on_imm(size_t qp, uint32_t imm);
  void release_data_credits(RecvOp& op);
  void deliver(RecvOp& op, const CtrlMsg& m, const char* payload);
  void advance_recv(RecvOp& op);
  void advance_send(SendOp& op);
  Status send_rendezvous(SendOp& op);
  Status send_adaptive(SendOp& op);
  bool write_room(size_t qp, bool with_imm) const;
  Scratch* get_scratch(size_t bytes);
  Status sender_mismatch(const SendOp& op) const;
  RecvOp* recv_op(uint64_t seq);
  SendOp* send_op(uint64_t seq);

  std::vector<VerbsLane> lanes_;
  VerbsChannel* ch_ = nullptr;  // lane 0's channel: the control stream
  std::string left_out_;        // lanes that did not connect, and why
  // Across the connection: QP q is lane qp_lane_[q]'s QP qp_local_[q]; lane l's first QP is
  // qp_base_[l]; lane_pos_[id] is the lane with that id. weights_/lane_qps_ feed lane_pieces().
  std::vector<size_t> qp_lane_, qp_local_, qp_base_, lane_qps_;
  size_t lane_pos_[kMaxLanes] = {};
  std::vector<double> weights_;
  // Adaptive striping: our receives ask for it (UCCL_VERBS_STRIPE=adaptive and the peer said
  // "astripe=1"); chunk and per-lane in-flight limit of our sends; bytes of data writes posted
  // and not completed, per QP and lane (every data write, static ones too).
  bool adaptive_ = false;
  size_t chunk_bytes_ = 0, inflight_bytes_ = 0;
  StripeLoad load_;
  VerbsConnInfo remote_;
  PeerContext peer_;
  int fd_ = -1;
  bool peer_ready_ = false;
  bool dead_ = false;
  Status error_;
  bool peer_gone_ = false;      // liveness socket closed: drain what arrived, then fail the rest
  std::string peer_note_;       // the root cause the peer sent before closing, if it failed
  double gone_at_ = 0;
  uint32_t liveness_tick_ = 0;
  uint64_t activity_ = 0;       // bumped whenever something moved (progress()'s return value)

  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  uint64_t next_send_seq_ = 0, next_recv_seq_ = 0;
  std::map<uint64_t, CtrlMsg> cts_stash_;      // CTS for sends not posted yet
  std::map<uint64_t, Stashed> unexpected_;     // messages for receives not posted yet

  // credits (see the header comment)
  uint64_t ctrl_sent_ = 0;      // control messages we sent
  uint64_t peer_freed_ = 0;     // the peer's reposted-buffer counter, as last heard
  uint64_t freed_ = 0;          // our reposted-buffer counter
  uint64_t advertised_ = 0;     // the last value of freed_ the peer was told
  uint32_t held_ = 0;           // our receive buffers held by unexpected EAGER messages
  bool mbox_inflight_ = false;

  std::vector<uint32_t> free_send_slots_;
  std::vector<int64_t> slot_final_of_;  // send slot -> seq of the send it finishes, or -1
  std::vector<int> sq_used_;            // posted, not yet completed send WRs per QP
  std::vector<uint32_t> data_credits_;  // QP >= 1: zero-length receives not reserved by a CTS
  std::vector<std::unique_ptr<Scratch>> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace uccl
