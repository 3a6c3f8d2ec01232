// VerbsEndpoint protocol state machines: what each control message means, how a send and a
// receive advance (eager / rendezvous / mismatch / reject). See verbs_endpoint.h for the design.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "base/reduce.h"
#include "transports/verbs/verbs_endpoint.h"

namespace uccl {
namespace {

constexpr size_t kMaxScratchBytes = size_t(1) << 30;
constexpr int kSqReserveForCtrl = 8;             // QP 0 send slots data writes leave to control

bool matches(const RecvRequest* r, const CtrlMsg& m) { return r->expect.same_call(m.env) && r->bytes == m.bytes; }

}  // namespace

VerbsEndpoint::RecvOp* VerbsEndpoint::recv_op(uint64_t seq) {
  if (recvs_.empty() || seq < recvs_.front().seq) return nullptr;
  uint64_t i = seq - recvs_.front().seq;
  return i < recvs_.size() ? &recvs_[i] : nullptr;
}

VerbsEndpoint::SendOp* VerbsEndpoint::send_op(uint64_t seq) {
  if (sends_.empty() || seq < sends_.front().seq) return nullptr;
  uint64_t i = seq - sends_.front().seq;
  return i < sends_.size() ? &sends_[i] : nullptr;
}

Status VerbsEndpoint::sender_mismatch(const SendOp& op) const {
  return Status(Code::kMismatch,
                peer_.describe() + " expected " + envelope_to_string(op.cts.env) + " with " +
                    std::to_string(op.cts.bytes) + " bytes, but rank " + std::to_string(peer_.my_rank) + " sent " +
                    envelope_to_string(op.req->env) + " with " + std::to_string(op.req->bytes) + " bytes",
                peer_.peer_rank);
}

// ---- incoming control messages -----------------------------------------------------------------

void VerbsEndpoint::on_ctrl(uint32_t slot, uint32_t byte_len) {
  const char* buf = ch_->recv_slot(slot);
  CtrlMsg m;
  std::memcpy(&m, buf, sizeof m);
  const bool eager_payload = m.type == static_cast<uint8_t>(CtrlType::kEager) && !(m.flags & kFlagInvalid);
  if (byte_len < sizeof m || m.magic != kCtrlMagic || m.type < 1 || m.type > 5 ||
      (eager_payload && byte_len != sizeof m + m.bytes)) {
    return fatal(Status(Code::kRemoteError, describe() + ": malformed control message from " + peer_.describe(),
                        peer_.peer_rank));
  }
  ++activity_;
  if (m.credits > peer_freed_) peer_freed_ = m.credits;
  const CtrlType type = static_cast<CtrlType>(m.type);

  if (type == CtrlType::kReady) {  // the active side reached RTS: we may send
    keep_lanes(m.addr);
    peer_ready_ = true;
    return repost(slot);
  }
  if (type == CtrlType::kCts) {  // about one of our sends
    repost(slot);
    if (SendOp* op = send_op(m.seq)) {
      if (!op->eager && !op->have_cts) op->cts = m, op->have_cts = true;
    } else if (m.seq >= next_send_seq_) {
      cts_stash_[m.seq] = m;
    }  // else: for a send that went eager (the receiver reports the mismatch) or already failed
    return;
  }
  // EAGER / RTS / DONE: about one of our receives
  if (RecvOp* op = recv_op(m.seq)) {
    deliver(*op, m, buf + sizeof m);
    repost(slot);
    return;
  }
  if (m.seq < next_recv_seq_) return repost(slot);  // its receive already completed or failed
  if (unexpected_.count(m.seq)) {
    return fatal(Status(Code::kRemoteError, describe() + ": " + peer_.describe() + " sent two messages for slot " +
                                                std::to_string(m.seq), peer_.peer_rank));
  }
  Stashed s;
  s.msg = m;
  if (eager_payload && m.bytes > 0) {
    s.slot = static_cast<int>(slot);  // keep the bytes where they are until the receive is posted
    ++held_;
  } else {
    repost(slot);
  }
  unexpected_[m.seq] = s;
}

// The last write of a rendezvous stripe landed on `qp`; imm = low 32 bits of the sequence.
void VerbsEndpoint::on_imm(size_t qp, uint32_t imm) {
  ++activity_;
  RecvOp* op = nullptr;
  if (!recvs_.empty()) {
    uint64_t base = recvs_.front().seq;
    op = recv_op(base + static_cast<uint32_t>(imm - static_cast<uint32_t>(base)));
  }
  if (!op || !(op->imm_wait >> qp & 1)) {
    return fatal(Status(Code::kRemoteError, describe() + ": " + peer_.describe() +
                                                " wrote data it was not cleared for (QP " + std::to_string(qp) +
                                                ", message " + std::to_string(imm) + ")", peer_.peer_rank));
  }
  op->imm_wait &= ~(uint64_t(1) << qp);  // its receive is reposted by the caller: the reservation ends
  if (op->imm_wait || op->done) return;
  RecvRequest* r = op->req;
  if (r->reduce)
    reduce(r->dst, r->acc ? r->acc : r->dst, op->scratch->ptr, r->bytes / dtype_size(r->dtype), r->dtype, r->op);
  op->done = true;
}

// A receive that ends without its data (failed after its CTS) gives back the receives it had
// reserved on QPs 1.. .
void VerbsEndpoint::release_data_credits(RecvOp& op) {
  for (size_t q = 1; q < data_credits_.size(); ++q)
    if (op.imm_wait >> q & 1) ++data_credits_[q];
  op.imm_wait = 0;
}

void VerbsEndpoint::deliver(RecvOp& op, const CtrlMsg& m, const char* payload) {
  if (op.done || op.invalid) return;  // already failed: the message is dropped
  RecvRequest* r = op.req;
  const CtrlType type = static_cast<CtrlType>(m.type);
  if (m.flags & kFlagInvalid) {
    op.error = Status(Code::kRemoteError,
                      peer_.describe() + " failed its send of " + envelope_to_string(m.env) + " (invalid arguments)",
                      peer_.peer_rank);
    op.done = true;
    return;
  }
  const bool ok = matches(r, m);
  switch (type) {
    case CtrlType::kEager:
      if (!ok) {
        op.error = mismatch_error(peer_, r->expect, r->bytes, m.env, m.bytes);
      } else if (r->bytes > 0 && r->reduce) {
        reduce(r->dst, r->acc ? r->acc : r->dst, payload, r->bytes / dtype_size(r->dtype), r->dtype, r->op);
      } else if (r->bytes > 0) {
        std::memcpy(r->dst, payload, r->bytes);
      }
      op.done = true;
      return;
    case CtrlType::kRts:
      if (op.rndv && ok) return;  // our CTS is out or about to go
      op.error = mismatch_error(peer_, r->expect, r->bytes, m.env, m.bytes);
      // The sender waits for a CTS: if ours is not out yet, send a refusal instead.
      if (op.cts_sent) op.done = true;
      else op.reject_pending = true;
      return;
    case CtrlType::kDone:
      if (!op.cts_sent) {
        return fatal(Status(Code::kRemoteError, describe() + ": " + peer_.describe() +
                                                    " finished a transfer it was not cleared for", peer_.peer_rank));
      }
      // Only sent when the sender refused our CTS: data completes by immediates instead.
      op.error = mismatch_error(peer_, r->expect, r->bytes, m.env, m.bytes);
      op.done = true;
      return;
    default:
      return;
  }
}

// ---- receives ----------------------------------------------------------------------------------

void VerbsEndpoint::advance_recv(RecvOp& op) {
  if (!unexpected_.empty()) {
    auto it = unexpected_.find(op.seq);
    if (it != unexpected_.end()) {
      Stashed s = it->second;
      unexpected_.erase(it);
      const char* payload = s.slot >= 0 ? ch_->recv_slot(static_cast<uint32_t>(s.slot)) + sizeof(CtrlMsg) : nullptr;
      deliver(op, s.msg, payload);
      if (s.slot >= 0) {
        --held_;
        repost(static_cast<uint32_t>(s.slot));
      }
      if (dead_ || op.done) return;
    }
  }
  if (op.invalid || op.reject_pending) {
    // Refuse the message so that a rendezvous sender does not wait for a CTS forever.
    if (!ctrl_ok(false)) return;
    CtrlMsg c;
    c.type = static_cast<uint8_t>(CtrlType::kCts);
    c.flags = kFlagReject | (op.invalid ? kFlagInvalid : 0);
    c.seq = op.seq;
    c.env = op.req->expect;
    c.bytes = op.req->bytes;
    Status s = post_ctrl(c, nullptr, 0, -1);
    if (!s.ok()) return fatal(s);
    op.done = true;
    return;
  }
  if (!op.rndv || op.cts_sent || !ctrl_ok(false)) return;
  RecvRequest* r = op.req;
  // Which QPs deliver an immediate, which lanes' ports must be able to write into the buffer:
  // adaptive, every QP and lane (the sender picks the lanes as it goes); static, those of the
  // cut the sender computes too.
  const bool adaptive = adaptive_ && stripes_adaptively(r->bytes, lanes_.size());
  const uint64_t mask = expected_imms(r->bytes, adaptive, weights_, lane_qps_);
  for (size_t q = 1; q < data_credits_.size(); ++q)
    if ((mask >> q & 1) && data_credits_[q] == 0) return;  // too many clear-to-sends out on this QP: later
  bool used[kMaxLanes] = {};
  for (size_t q = 0; q < qp_lane_.size(); ++q)
    if (mask >> q & 1) used[qp_lane_[q]] = true;
  uint64_t addr;
  uint32_t rkey[kMaxLanes] = {};
  if (r->reduce) {
    if (!op.scratch && !(op.scratch = get_scratch(r->bytes))) return;  // wait for scratch to free up
    addr = reinterpret_cast<uint64_t>(op.scratch->ptr);
    for (size_t l = 0; l < lanes_.size(); ++l) rkey[l] = op.scratch->mr[l]->rkey;
  } else {
    for (size_t l = 0; l < lanes_.size(); ++l) {
      if (!used[l] || op.mr[l]) {
        rkey[l] = op.mr[l].rkey;
        continue;
      }
      auto m = lanes_[l].ch->device().mr_cache().acquire(r->dst, r->bytes, true);
      if (!m.ok()) return fatal(m.status().with_context("receive from " + peer_.describe()));
      op.mr[l] = m.value();
      rkey[l] = op.mr[l].rkey;
    }
    addr = reinterpret_cast<uint64_t>(r->dst);
  }
  CtrlMsg c;
  c.type = static_cast<uint8_t>(CtrlType::kCts);
  c.flags = adaptive ? kFlagAdaptive : 0;
  c.seq = op.seq;
  c.env = r->expect;
  c.bytes = r->bytes;
  c.addr = addr;
  c.rkey = rkey[0];
  for (size_t l = 1; l < lanes_.size(); ++l) c.lane_rkey[l - 1] = rkey[l];
  Status s = post_ctrl(c, nullptr, 0, -1);
  if (!s.ok()) return fatal(s);
  op.cts_sent = true;
  op.imm_wait = mask;
  for (size_t q = 1; q < data_credits_.size(); ++q)
    if (mask >> q & 1) --data_credits_[q];
}

VerbsEndpoint::Scratch* VerbsEndpoint::get_scratch(size_t bytes) {
  Scratch* best = nullptr;
  for (auto& s : scratch_)
    if (!s->busy && s->cap >= bytes && (!best || s->cap < best->cap)) best = s.get();
  if (best) {
    best->busy = true;
    return best;
  }
  size_t cap = size_t(1) << 20;
  while (cap < bytes) cap <<= 1;
  if (scratch_bytes_ + cap > kMaxScratchBytes) {
    // Drop idle buffers; if others are busy, wait for them rather than grow without bound.
    bool busy = false;
    for (auto it = scratch_.begin(); it != scratch_.end();) {
      if ((*it)->busy) {
        busy = true;
        ++it;
        continue;
      }
      free_scratch(**it);
      scratch_bytes_ -= (*it)->cap;
      it = scratch_.erase(it);
    }
    if (busy && scratch_bytes_ + cap > kMaxScratchBytes) return nullptr;
  }
  std::unique_ptr<Scratch> s(new Scratch());
  s->ptr = static_cast<char*>(std::aligned_alloc(4096, cap));
  bool ok = s->ptr != nullptr;
  for (size_t l = 0; ok && l < lanes_.size(); ++l) {  // every lane's port writes into it
    VerbsDevice& d = lanes_[l].ch->device();
    s->mr.push_back(d.api()->reg_mr(d.pd(), s->ptr, cap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    ok = s->mr.back() != nullptr;
  }
  if (!ok) {
    free_scratch(*s);
    fatal(Status(Code::kSystemError, describe() + ": cannot register a " + std::to_string(cap) +
                                         "-byte reduce scratch buffer", peer_.peer_rank));
    return nullptr;
  }
  s->cap = cap;
  s->busy = true;
  scratch_bytes_ += cap;
  scratch_.push_back(std::move(s));
  return scratch_.back().get();
}

// ---- sends -------------------------------------------------------------------------------------

void VerbsEndpoint::advance_send(SendOp& op) {
  if (!can_post()) return;
  SendRequest* r = op.req;
  if (op.invalid || op.eager) {
    // An eager message may sit in the peer's buffer until its receive is posted: keep the reserve.
    if (!ctrl_ok(!op.invalid && r->bytes > 0)) return;
    CtrlMsg m;
    m.type = static_cast<uint8_t>(CtrlType::kEager);
    m.flags = op.invalid ? kFlagInvalid : 0;
    m.seq = op.seq;
    m.env = r->env;
    m.bytes = r->bytes;
    Status s = post_ctrl(m, r->data, op.invalid ? 0 : r->bytes, static_cast<int64_t>(op.seq));
    if (!s.ok()) return fatal(s);
    op.final_posted = true;
    return;
  }
  Status s = send_rendezvous(op);
  if (!s.ok()) fatal(s);
}

Status VerbsEndpoint::send_rendezvous(SendOp& op) {
  SendRequest* r = op.req;
  if (!op.have_cts) {
    // Tell the receiver a large message is coming: if it expected something else it answers
    // with a refusal instead of leaving us waiting for a CTS that never comes.
    if (op.rts_sent || !ctrl_ok(false)) return Status::Ok();
    CtrlMsg m;
    m.type = static_cast<uint8_t>(CtrlType::kRts);
    m.seq = op.seq;
    m.env = r->env;
    m.bytes = r->bytes;
    UCCL_RETURN_IF_ERROR(post_ctrl(m, nullptr, 0, -1));
    op.rts_sent = true;
    return Status::Ok();
  }
  const CtrlMsg& c = op.cts;
  if (c.flags & kFlagReject) {
    op.error = (c.flags & kFlagInvalid)
                   ? Status(Code::kRemoteError, peer_.describe() + " failed its receive of message #" +
                                                    std::to_string(op.seq) + " (invalid arguments)", peer_.peer_rank)
                   : sender_mismatch(op);
    op.final_posted = op.finished = true;
    return Status::Ok();
  }
  if (!c.env.same_call(r->env) || c.bytes != r->bytes) {
    if (!ctrl_ok(false)) return Status::Ok();
    op.error = sender_mismatch(op);
    CtrlMsg m;
    m.type = static_cast<uint8_t>(CtrlType::kDone);
    m.flags = kFlagMismatch;
    m.seq = op.seq;
    m.env = r->env;
    m.bytes = r->bytes;
    UCCL_RETURN_IF_ERROR(post_ctrl(m, nullptr, 0, static_cast<int64_t>(op.seq)));
    op.final_posted = true;
    return Status::Ok();
  }
  if (c.flags & kFlagAdaptive) return send_adaptive(op);
  // The writes: the lanes' shares in proportion to their rates, each cut over its lane's QPs in
  // contiguous pieces written in parallel; the last piece on each QP carries the immediate that
  // tells the receiver it has landed (verbs_lanes.h; the receiver computed the same list).
  if (op.pieces.empty()) op.pieces = lane_pieces(r->bytes, weights_, lane_qps_);
  while (op.next_piece < op.pieces.size()) {
    const LanePiece& p = op.pieces[op.next_piece];
    if (!op.mr[p.lane]) {
      auto m = lanes_[p.lane].ch->device().mr_cache().acquire(r->data, r->bytes, false);
      if (!m.ok()) return m.status().with_context("send to " + peer_.describe());
      op.mr[p.lane] = m.value();
    }
    if (!write_room(p.qp, p.with_imm)) return Status::Ok();  // continue next time
    UCCL_RETURN_IF_ERROR(post_write(op, p));
    ++op.next_piece;
  }
  op.final_posted = true;  // finished when the last acknowledgement arrives
  return Status::Ok();
}

// Whether a data write may go on `qp` now: send queue space (QP 0 keeps some for control), and
// for an immediate on QP 0 a control buffer of the peer's (it consumes one).
bool VerbsEndpoint::write_room(size_t qp, bool with_imm) const {
  const int limit = qp == 0 ? kMaxSendWr - kSqReserveForCtrl : kMaxSendWr;
  return sq_used_[qp] < limit && !(with_imm && qp == 0 && !ctrl_ok(false));
}

// Adaptive striping (verbs_lanes.h): chunks in order, each to the QP StripeLoad picks (its lane
// has the fewest bytes in flight, below the limit); then every QP of the connection still owing
// its immediate gets a zero-length write with one. Called again by progress() as writes complete.
Status VerbsEndpoint::send_adaptive(SendOp& op) {
  SendRequest* r = op.req;
  if (!op.adaptive) {
    if (!stripes_adaptively(r->bytes, lanes_.size()))
      return Status(Code::kRemoteError, describe() + ": " + peer_.describe() + " asked for adaptive striping of a " +
                                            std::to_string(r->bytes) + "-byte message over " +
                                            std::to_string(lanes_.size()) + " lane(s)", peer_.peer_rank);
    for (size_t l = 0; l < lanes_.size(); ++l) {  // every lane may carry a chunk or a closing write
      if (op.mr[l]) continue;
      auto m = lanes_[l].ch->device().mr_cache().acquire(r->data, r->bytes, false);
      if (!m.ok()) return m.status().with_context("send to " + peer_.describe());
      op.mr[l] = m.value();
    }
    op.cut.start(r->bytes, chunk_bytes_, qp_lane_.size());
    op.adaptive = true;
  }
  while (op.cut.data_left()) {
    const size_t qp = load_.pick(inflight_bytes_);
    if (qp == SIZE_MAX || !write_room(qp, op.cut.last_chunk())) return Status::Ok();  // after completions
    UCCL_RETURN_IF_ERROR(post_write(op, op.cut.next_chunk(qp, qp_lane_[qp])));
  }
  LanePiece p;
  while (op.cut.closing(qp_lane_, &p)) {
    if (!write_room(p.qp, true)) return Status::Ok();
    UCCL_RETURN_IF_ERROR(post_write(op, p));
    op.cut.closed(p.qp);
  }
  if (!op.cut.done())
    return Status(Code::kInternal, describe() + ": adaptive send to " + peer_.describe() + " owes an immediate on no QP",
                  peer_.peer_rank);
  op.final_posted = true;  // finished when the last acknowledgement arrives
  return Status::Ok();
}

void VerbsEndpoint::free_scratch(Scratch& s) {
  for (size_t l = 0; l < s.mr.size() && l < lanes_.size(); ++l)
    if (s.mr[l]) lanes_[l].ch->device().api()->dereg_mr(s.mr[l]);
  s.mr.clear();
  std::free(s.ptr);
  s.ptr = nullptr;
}

}  // namespace uccl
