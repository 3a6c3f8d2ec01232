// The shm Endpoint: FIFO messages through two single-producer/single-consumer byte rings.
//
// Data path, per direction (ring i written by one process, read by the other):
//  * A message is a 64-byte MsgHeader followed by its payload, padded to 64 bytes, so headers
//    never straddle the wrap point and every payload starts cache-line (hence element) aligned.
//  * Seals (shm_line.h): every header ends with a seal, stored (release) by tx_publish just
//    before `head`, with a stamp of the header's ring position. The reader waits for the next
//    message by polling the seal of the line at its tail, not the `head` counter, wherever that
//    line held a header in the previous lap (else stale payload could pass for a seal: there it
//    asks `head`). The writer still publishes `head` after every message: it accounts the
//    pieces and serves those other places, and its line stays in the writer's cache while
//    nobody polls it.
//  * One-line messages (kMsgLine, payload <= kLineBytes = 24): the payload rides in the header
//    fields such a message does not need, so a scalar all_reduce step moves one shared line
//    (written, sealed, read) instead of three (header, payload, head): the 8-byte ping-pong of
//    the endpoints went from 0.45 to 0.235 us per half round trip on the 2-core VM.
//  * Small messages (payload <= one piece): header + payload are written, then sealed with
//    kSealWhole (the payload lines are complete too) and `head` published; the reader takes the
//    whole message on the seal alone.
//  * Larger ring messages are written piece by piece (ShmOptions::piece_bytes), publishing
//    after each piece, so the reader copies (or reduces) piece k while the writer writes k+1:
//    both cores work at once and the pieces stay cache-resident between them. Pieces split at
//    the wrap point; the reader consumes them as they come and releases space piece by piece.
//  * A reduce receive applies uccl::reduce(dst, acc ? acc : dst, ring_piece) straight out of
//    the ring: no temporary, one pass over dst.
//  * CMA messages (large, when the reader proved it can read the writer's memory): the ring
//    carries only the header with the sender's address; the reader pulls with process_vm_readv
//    straight into dst (or into a cache-sized bounce buffer and reduces from it), then bumps
//    ring.cma_done. The sender's request completes when cma_done covers it, and completions
//    stay FIFO: an inline send that follows a CMA send completes after it.
//    Why only large messages (UCCL_SHM_CMA_MIN_BYTES, 1 MiB): each call pins pages, and data the
//    sender has just written sits dirty in its core's L2, which one pulling core drains slower
//    than the pipelined ring does with both cores copying. Measured on a 2-core VM, a 2-rank
//    allreduce whose 512 KiB halves went through CMA ran at 6 GB/s busbw against 10 by ring;
//    from 1 MiB halves up CMA wins (copies up to 2.5x, a whole step's work moves to one side).
//    Very large messages (ShmOptions::cma_max_bytes) go back to the ring: see there.
//  * CMA push (ShmOptions::cma_push), for the large sends of exchange steps (SendRequest::
//    duplex): the sender waits until the matching receive is posted, writes the payload into
//    the receiver's buffer with process_vm_writev and then sends a header flagged kMsgPush;
//    the receive completes on that header, the send at once. The sender reads its own data,
//    which it usually just wrote or copied (all_gather's own block, all_reduce's reduced half),
//    from its own cache instead of a puller snooping it out of the other core's: 2-rank
//    all_gather of 512 KiB blocks 42 -> 33 us per call on the 2-core VM in a C model of the
//    two schemes (benchmarks/micro/cma_all_gather_model.c), 2-8 MiB blocks 10-16% faster with
//    the tee copy interleaved chunk by chunk (SendRequest::tee). One-way sends are still
//    pulled: then the receiver copies while the sender goes on.
//    Receives that are final output (RecvRequest::final: all_gather's and broadcast's blocks,
//    never read again by the receiver) are offered from ShmOptions::push_min_bytes (16 KiB),
//    and a sender whose request says so (SendRequest::to_final) claims them from that size:
//    for such data the receiver's copy out of the ring is pure cost (2-rank all_gather of
//    64 KiB: see kShmPushMinBytes). Data the receiver reads right after stays on the ring.
//    Offers: every posted receive bumps ring.recvs_posted; a large plain one also fills
//    ring.offers[m % kPushOfferSlots] for message number m with its address, size and envelope.
//    A sender whose next message m is large waits until recvs_posted > m, then claims the offer
//    (compare-and-swap Offered -> Claimed; same size and call, else it falls back to a pull
//    header and the receiver reports the mismatch), writes a chunk per step and marks it
//    Finished before the header. A receiver that fails revokes its open offers and, for a claimed
//    one, asks the writer to stop (Cancel) and waits for Finished, so no peer writes into a
//    buffer after its receive has returned an error.
//
// Progress interleaves the directions one piece at a time, so a bidirectional exchange with
// both rings full never deadlocks and both rings stay busy.
//
// Sleeping: an idle driver may sleep on this side's doorbell futex (arm_wait, see Doorbell in
// shm_segment.h); every post and every progress() that moved rings the peer's doorbell if the
// peer sleeps (ring_peer: a fence and a read when it does not), so a sleeping rank wakes as soon
// as the message, the ring space or the ack it waits for is there. A dead peer rings nothing:
// the sleep is bounded (milliseconds) and liveness is checked on waking.
//
// Liveness: the socket from the core carries no data. About once a millisecond of spinning
// (read from the coarse clock, no syscall) it is polled with a zero timeout, together with a
// pidfd of the peer where we have one (a forked child of the peer keeps the socket open). When the peer is
// gone, messages that are already complete in the ring are still delivered (a peer may send
// and exit), everything else fails with peer_closed_error. fail_all() and fatal errors
// (mismatch, corrupt ring, CMA failure) leave a note in the segment and shut the socket down,
// so the peer fails at once too instead of waiting for a message that will never come.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "transports/shm/shm_line.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"
#include "transports/transport.h"

namespace uccl {
namespace shm {

constexpr uint64_t kLine = 64;
// A note that starts with this carries the root cause of a failure (fail_all), see transport.h.
constexpr char kAbortNotePrefix[] = "aborted: ";
enum MsgFlags : uint32_t { kMsgInline = 0, kMsgCma = 1, kMsgPush = 2, kMsgLine = 3 };

// In front of every message in the ring. Same host, same build: plain struct layout.
struct MsgHeader {
  Envelope env;          // what the sender is executing (checked against RecvRequest::expect)
  uint64_t bytes;        // payload bytes (kMsgLine: bytes, cma_address, cma_seq hold the payload)
  uint64_t cma_address;  // kMsgCma: where the payload lives in the sender
  uint64_t cma_seq;      // kMsgCma: 1, 2, 3... per direction; the reader acks by cma_done
  uint64_t seal;         // written last: flags, a kMsgLine's byte count, the position's stamp
};
static_assert(sizeof(MsgHeader) == kLine, "a header is one cache line");
static_assert(offsetof(MsgHeader, seal) - offsetof(MsgHeader, bytes) == kLineBytes, "a line's payload fits");
inline char* line_payload(MsgHeader* h) { return reinterpret_cast<char*>(h) + offsetof(MsgHeader, bytes); }
inline const char* line_payload(const MsgHeader* h) { return reinterpret_cast<const char*>(h) + offsetof(MsgHeader, bytes); }
inline uint64_t payload_bytes(const MsgHeader& h) {
  return seal_flags(h.seal) == kMsgLine ? seal_line_bytes(h.seal) : h.bytes;
}

// Which path messages took; tests use it to prove CMA really ran.
struct ShmStats {
  uint64_t ring_sends = 0, cma_sends = 0, push_sends = 0, ring_recvs = 0, cma_recvs = 0, push_recvs = 0;
  uint64_t line_sends = 0, line_recvs = 0;  // of the ring ones, those in one line (kMsgLine)
};

struct ShmEndpointParams {
  PeerContext peer;
  Segment segment;
  int side = 0;  // 0: active (writes ring 0), 1: passive (writes ring 1)
  int liveness_fd = -1;
  pid_t peer_pid = 0;
  bool peer_pid_verified = false;  // the setup probe read the peer's word at this pid
  ShmOptions options;
};

class ShmEndpoint final : public Endpoint {
 public:
  explicit ShmEndpoint(ShmEndpointParams p);
  ~ShmEndpoint() override;

  void post_send(SendRequest* r) override;
  void post_recv(RecvRequest* r) override;
  bool progress() override;
  bool has_pending() const override { return !sendq_.empty() || !unacked_.empty() || !recvq_.empty(); }
  // The header at the ring's tail, when no receive is in progress (see Endpoint::peek).
  Result<bool> peek(Envelope* env, size_t* bytes) override;
  void fail_all(const Status& why) override;
  // The close note the peer left (its abort names the root cause), before the ring is drained.
  Status peer_farewell() const override { return ctl_ && peer_left_note() ? peer_gone_status() : Status::Ok(); }
  TransportKind kind() const override { return TransportKind::kShm; }
  bool takes_tee() const override { return true; }
  bool takes_turns() const override { return true; }  // by ring pieces and CMA chunks
  bool takes_alternates() const override { return true; }
  void arm_wait(WaitSet* ws) override;
  void disarm_wait() override;
  void note_waiting_on_cpu(int cpu) override {
    ctl_->bell[side_].cpu.store(static_cast<uint32_t>(cpu + 1), std::memory_order_relaxed);
  }
  bool peer_waits_on_cpu(int cpu) const override {
    return ctl_->bell[1 - side_].cpu.load(std::memory_order_relaxed) == static_cast<uint32_t>(cpu + 1);
  }
  std::string describe() const override;

  const ShmStats& stats() const { return stats_; }
  bool cma_send_enabled();  // may our large sends use CMA? (false until the peer's probe verdict)

 private:
  struct Unacked {
    SendRequest* r;
    uint64_t cma_seq;  // 0: inline, already written
  };

  // ---- send side (shm_endpoint_io.cc)
  bool send_step();  // one message start or one piece of the front send
  bool send_start(SendRequest* r);
  bool send_piece(SendRequest* r);
  void send_written(SendRequest* r, uint64_t cma_seq);
  bool reap_sends();  // completes sends whose CMA pull the reader acknowledged
  void finish_send(SendRequest* r);
  bool tx_reserve(uint64_t bytes);
  void tx_publish();
  void copy_to_ring(uint64_t pos, const void* src, size_t n);
  void write_header(const SendRequest* r, uint32_t flags, uint64_t cma_seq, bool whole = false);  // sealed by tx_publish
  void tee_copy(const SendRequest* r, size_t offset, size_t n);  // bytes [offset, offset + n), if r has a tee
  bool push_enabled();  // may we write into the peer (our own probe's verdict, and options)?
  enum class Offer { kWait, kNone, kTaken };
  Offer claim_offer(const SendRequest* r);
  bool push_chunk(SendRequest* r);
  void end_push();  // marks the claimed offer Finished (pushed, or given up)

  // ---- receive side (shm_endpoint_io.cc)
  bool recv_step();
  bool recv_start(RecvRequest* r);
  bool recv_ring_piece(RecvRequest* r);
  bool recv_cma_chunk(RecvRequest* r);
  void offer_push(uint64_t msg, const RecvRequest* r);
  void revoke_offers();  // before failing receives: no peer may push into them afterwards
  void deliver(RecvRequest* r, size_t offset, const char* src, size_t n);
  void finish_recv(RecvRequest* r);
  uint64_t rx_available(uint64_t want);
  bool rx_header_ready();  // is a whole header at rx_tail_ (seal or head)?

  void ring_peer();  // wakes the peer if it sleeps on its doorbell (after we wrote something)

  // ---- liveness and failure (shm_endpoint.cc)
  void check_liveness();
  bool peer_seems_gone();  // polls the liveness socket and the peer's pidfd once, now
  void on_peer_gone();
  void drain_after_peer_gone();
  void fatal(const Status& s, const std::string& note);  // local verdict: note for the peer, shut down
  void die(const Status& s);                             // fail everything, refuse new posts
  void leave_note(const std::string& text);
  Status peer_gone_status() const;  // from the note the peer left, if any
  // A peer that failed writes its note before its operations fail and their buffers go back
  // to its caller, so a CMA address that stopped being valid after a note is explained by it.
  bool peer_left_note() const { return ctl_->close_note[1 - side_].set.load(std::memory_order_acquire) != 0; }

  PeerContext peer_;
  Segment segment_;
  SegmentControl* ctl_;
  int side_;
  int fd_;         // liveness socket from the core
  int pidfd_ = -1;  // the peer process itself, when CMA proved which process that is
  pid_t peer_pid_;
  ShmOptions opt_;
  uint64_t ring_bytes_, ring_mask_, piece_;

  // Writer state (ring `side_`). Local copies keep the shared lines out of the hot path:
  // tail is read only when the cached value says the ring is full.
  RingControl* tx_ctl_;
  char* tx_data_;
  uint64_t tx_head_ = 0, tx_published_ = 0, tx_tail_cache_ = 0;
  uint64_t tx_off_ = 0;
  bool tx_in_message_ = false;
  MsgHeader* tx_unsealed_ = nullptr;  // the header written last, until tx_publish() seals it
  uint64_t tx_seal_ = 0;
  uint32_t tx_cma_ = 0;  // cached verdict: 0 unknown, 1 yes, 2 no
  uint64_t cma_posted_ = 0;
  uint64_t tx_msgs_ = 0;     // messages started (the number of the next one)
  uint32_t tx_push_ = 0;     // cached push verdict, like tx_cma_
  bool pushing_ = false;     // the front send is being pushed into push_address_
  uint64_t push_address_ = 0, push_tag_ = 0;  // push_tag_: the claimed offer's msg without state
  std::deque<SendRequest*> sendq_;  // not yet fully written
  std::deque<Unacked> unacked_;     // written, waiting for FIFO completion / CMA ack

  // Reader state (ring 1 - side_).
  RingControl* rx_ctl_;
  char* rx_data_;
  uint64_t rx_tail_ = 0, rx_head_cache_ = 0;
  uint64_t rx_off_ = 0;
  bool rx_in_message_ = false;
  alignas(64) MsgHeader rx_hdr_{};  // a kMsgLine payload is reduced from here
  PayloadLines rx_payload_lines_;   // where a seal cannot be trusted (shm_line.h)
  uint64_t cma_acked_ = 0;
  uint64_t rx_posted_ = 0;  // receives posted (the number of the next one)
  std::deque<RecvRequest*> recvq_;
  std::unique_ptr<char, void (*)(void*)> bounce_{nullptr, nullptr};  // CMA reduce staging

  // Failure state.
  bool dead_ = false;       // every request fails with dead_status_
  Status dead_status_;
  bool peer_gone_ = false;  // sends fail; receives complete only from what the ring holds
  Status gone_status_;
  int64_t last_poll_ms_ = 0;
  uint32_t liveness_calls_ = 0;  // check_liveness() looks at the clock every 16th call
  bool warned_data_ = false;

  ShmStats stats_;
};

}  // namespace shm
}  // namespace uccl
