// VerbsEndpoint life cycle: posting, the progress loop, completions, credits, liveness, failure.
// The protocol state machines are in verbs_endpoint_proto.cc.
#include "transports/verbs/verbs_endpoint.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "base/log.h"

namespace uccl {
namespace {

constexpr uint64_t kCreditReserve = 4;     // buffers eager messages leave to CTS/RTS/DONE/immediates
// The liveness socket is polled every kLivenessEvery progress() calls (a poll() syscall; a clock
// read is no cheaper where the clock source is not the TSC, e.g. in VMs).
constexpr uint32_t kLivenessEvery = 256;
constexpr double kGoneGraceS = 0.1;        // after HUP: completions that already arrived still count

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* wr_what(WrKind k) {
  switch (k) {
    case WrKind::kCtrlRecv: return "control receive";
    case WrKind::kCtrlSend: return "control send";
    case WrKind::kData: return "RDMA write";
    case WrKind::kMailbox: return "credit write";
    case WrKind::kDataRecv: return "data receive";
  }
  return "work request";
}

const char* wc_hint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return ": the peer stopped acknowledging (process or node died, or the path is down; "
             "UCCL_IB_TIMEOUT/UCCL_IB_RETRY_CNT bound the wait)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return ": the peer had no receive buffer posted";
    case IBV_WC_REM_ACCESS_ERR:
      return ": the peer refused the RDMA access (rkey or range no longer valid: it failed or deregistered)";
    case IBV_WC_REM_INV_REQ_ERR: return ": the peer rejected the request as invalid";
    case IBV_WC_REM_OP_ERR: return ": the peer could not complete the operation";
    case IBV_WC_WR_FLUSH_ERR: return ": the queue pair was already in the error state";
    default: return "";
  }
}

bool remote_side(ibv_wc_status s) {
  return s == IBV_WC_RETRY_EXC_ERR || s == IBV_WC_RNR_RETRY_EXC_ERR || s == IBV_WC_REM_ACCESS_ERR ||
         s == IBV_WC_REM_INV_REQ_ERR || s == IBV_WC_REM_OP_ERR || s == IBV_WC_REM_ABORT_ERR ||
         s == IBV_WC_WR_FLUSH_ERR || s == IBV_WC_RESP_TIMEOUT_ERR;
}

}  // namespace

VerbsEndpoint::VerbsEndpoint(std::vector<VerbsLane> lanes, const VerbsConnInfo& remote, const PeerContext& peer,
                             int liveness_fd, bool active, std::string left_out, const VerbsOptions& options)
    : lanes_(std::move(lanes)),
      ch_(lanes_[0].ch.get()),
      left_out_(std::move(left_out)),
      adaptive_(options.stripe_adaptive && remote.adaptive_writer),
      chunk_bytes_(options.stripe_chunk_bytes),
      inflight_bytes_(std::max<size_t>(1, options.stripe_inflight_bytes)),
      remote_(remote),
      peer_(peer),
      fd_(liveness_fd),
      peer_ready_(active) {
  layout_lanes();
  for (uint32_t s = kCtrlSendSlots; s > 0; --s) free_send_slots_.push_back(s - 1);
  slot_final_of_.assign(kCtrlSendSlots, -1);
  if (active) {
    // Our QPs are in RTS and the passive side's were before it answered: say so, so it may send,
    // and name the lanes we connected (the passive side drops the others).
    CtrlMsg ready;
    ready.type = static_cast<uint8_t>(CtrlType::kReady);
    for (auto& l : lanes_) ready.addr |= uint64_t(1) << l.id;
    Status s = post_ctrl(ready, nullptr, 0, -1);
    if (!s.ok()) fatal(s);
  }
  UCCL_INFO("verbs: endpoint %s to %s (peer port %s)", describe().c_str(), peer_.describe().c_str(),
            remote_.device.c_str());
}

VerbsEndpoint::~VerbsEndpoint() {
  std::vector<std::shared_ptr<VerbsDevice>> devs;
  for (auto& l : lanes_) {
    devs.push_back(l.ch->device_ptr());
    l.ch->to_error();
  }
  for (auto& l : lanes_) l.ch.reset();  // QPs gone: nothing can touch the buffers below any more
  ch_ = nullptr;
  for (size_t l = 0; l < devs.size(); ++l) {
    for (auto& op : sends_) devs[l]->mr_cache().release(&op.mr[l]);
    for (auto& op : recvs_) devs[l]->mr_cache().release(&op.mr[l]);
    for (auto& s : scratch_)
      if (l < s->mr.size() && s->mr[l]) devs[l]->api()->dereg_mr(s->mr[l]);
  }
  for (auto& s : scratch_) std::free(s->ptr);
  if (fd_ >= 0) ::close(fd_);
}

// ---- posting -----------------------------------------------------------------------------------

void VerbsEndpoint::post_send(SendRequest* r) {
  r->state = ReqState::kPending;
  r->error = Status();
  if (dead_) return fail(r, error_);
  SendOp op;
  op.req = r;
  op.seq = next_send_seq_++;
  op.eager = r->bytes <= remote_.ctrl_slot_bytes - sizeof(CtrlMsg);
  if (r->bytes > 0 && !r->data) {
    op.invalid = true;
    op.eager = true;
    op.error = InvalidArgument("verbs send of " + std::to_string(r->bytes) + " bytes to " + peer_.describe() +
                               " with a null buffer");
  }
  auto it = cts_stash_.find(op.seq);
  if (it != cts_stash_.end()) {
    if (!op.eager) op.cts = it->second, op.have_cts = true;
    cts_stash_.erase(it);  // an eager send never needs its CTS (the receiver will report a mismatch)
  }
  sends_.push_back(op);
}

void VerbsEndpoint::post_recv(RecvRequest* r) {
  r->state = ReqState::kPending;
  r->error = Status();
  if (dead_) return fail(r, error_);
  RecvOp op;
  op.req = r;
  op.seq = next_recv_seq_++;
  op.rndv = r->bytes > kEagerLimit;
  std::string bad;
  if (r->bytes > 0 && !r->dst) bad = "null destination";
  if (r->reduce && (!dtype_valid(static_cast<int>(r->dtype)) || !redop_valid(static_cast<int>(r->op))))
    bad = "invalid dtype or reduction op";
  else if (r->reduce && r->bytes % dtype_size(r->dtype) != 0)
    bad = std::to_string(r->bytes) + " bytes is not a whole number of " + dtype_name(r->dtype);
  if (!bad.empty()) {
    // Still consumes its sequence number, so both sides stay aligned; the peer is told.
    op.invalid = true;
    op.error = InvalidArgument("verbs receive from " + peer_.describe() + ": " + bad);
  }
  recvs_.push_back(op);
}

// ---- progress ----------------------------------------------------------------------------------

bool VerbsEndpoint::progress() {
  if (dead_) return false;
  const uint64_t before = activity_;
  check_liveness();
  bool moved = false;
  poll_completions(&moved);
  if (dead_) return true;
  uint64_t mb = *ch_->mbox();
  if (mb > peer_freed_) peer_freed_ = mb;
  for (auto& op : recvs_) {
    if (!op.done) advance_recv(op);
    if (dead_) return true;
  }
  for (auto& op : sends_) {
    if (!op.final_posted) advance_send(op);
    if (dead_) return true;
  }
  maybe_advertise_credits();
  finalize(&moved);
  if (peer_gone_ && !dead_ && (!has_pending() || steady_s() > gone_at_ + kGoneGraceS)) {
    fatal(!peer_note_.empty() ? peer_failed_error(peer_, peer_note_)
                              : peer_closed_error(peer_, describe() + ": liveness socket closed with " +
                                                             std::to_string(sends_.size()) + " sends and " +
                                                             std::to_string(recvs_.size()) + " receives pending"));
  }
  return moved || activity_ != before;
}

void VerbsEndpoint::poll_completions(bool* moved) {
  for (size_t l = 0; l < lanes_.size() && !dead_; ++l) {
    int budget = 4;
    poll_cq(*lanes_[l].ch, &budget, moved);
  }
}

void VerbsEndpoint::poll_cq(VerbsChannel& ch, int* budget, bool* moved) {
  ibv_wc wc[32];
  for (; *budget > 0 && !dead_; --*budget) {
    int n = ibv_poll_cq(ch.cq(), 32, wc);
    if (n < 0) return fatal(Status(Code::kSystemError, describe() + ": ibv_poll_cq failed", peer_.peer_rank));
    if (n == 0) break;
    *moved = true;
    for (int i = 0; i < n; ++i) {
      const ibv_wc& c = wc[i];
      WrKind kind = wr_kind(c.wr_id);
      const size_t field = wr_qp(c.wr_id);
      const size_t qp = qp_base_[lane_pos_[(field >> 5) % kMaxLanes]] + (field & 31);  // across the connection
      uint64_t idx = wr_index(c.wr_id);
      const bool is_recv = kind == WrKind::kCtrlRecv || kind == WrKind::kDataRecv;
      if (!is_recv && qp < sq_used_.size()) --sq_used_[qp];
      if (kind == WrKind::kCtrlSend) {
        uint32_t slot = static_cast<uint32_t>(idx);
        if (c.status == IBV_WC_SUCCESS && slot_final_of_[slot] >= 0) {
          if (SendOp* op = send_op(static_cast<uint64_t>(slot_final_of_[slot]))) op->finished = true;
        }
        slot_final_of_[slot] = -1;
        free_send_slots_.push_back(slot);
      } else if (kind == WrKind::kData) {
        load_.completed(qp);
        if (SendOp* op = send_op(idx)) {
          // The last write's acknowledgement completes a rendezvous send.
          if (--op->writes_inflight == 0 && op->final_posted && c.status == IBV_WC_SUCCESS) op->finished = true;
        }
      } else if (kind == WrKind::kMailbox) {
        mbox_inflight_ = false;
      }
      if (c.status != IBV_WC_SUCCESS) {
        if (!dead_) on_completion_error(c);
        continue;
      }
      if (kind == WrKind::kCtrlRecv) {
        if (c.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {  // consumed a control buffer, wrote none
          on_imm(0, ntohl(c.imm_data));
          if (!dead_) repost(static_cast<uint32_t>(idx));
        } else {
          on_ctrl(static_cast<uint32_t>(idx), c.byte_len);
        }
      } else if (kind == WrKind::kDataRecv && qp < qp_local_.size()) {
        on_imm(qp, ntohl(c.imm_data));
        Status s = dead_ ? Status::Ok() : ch.post_data_recv(qp_local_[qp]);
        if (!s.ok()) return fatal(s);
        ++data_credits_[qp];
      }
      if (dead_) return;
    }
    if (n < 32) break;
  }
}

void VerbsEndpoint::on_completion_error(const ibv_wc& wc) {
  char detail[96];
  std::snprintf(detail, sizeof detail, " (wc status %d, vendor error 0x%x)", static_cast<int>(wc.status),
                wc.vendor_err);
  const IbvApi* api = ch_->device().api();
  std::string msg = describe() + ": " + wr_what(wr_kind(wc.wr_id)) + " to " + peer_.describe() + " failed: " +
                    api->wc_status_str(wc.status) + detail + wc_hint(wc.status);
  fatal(Status(remote_side(wc.status) ? Code::kRemoteError : Code::kSystemError, msg, peer_.peer_rank));
}

void VerbsEndpoint::check_liveness() {
  if (fd_ < 0 || peer_gone_) return;
  if (peer_ready_ && ++liveness_tick_ % kLivenessEvery != 0) return;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;
  // The socket carries nothing but the note a failing peer sends before it closes, so any
  // event on it means the peer is going away.
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLIN | POLLRDHUP)) {
    peer_note_ = read_close_note(fd_);
    peer_gone_ = true;
    gone_at_ = steady_s();
  }
}

void VerbsEndpoint::fatal(const Status& why) {
  if (dead_) return;
  dead_ = true;
  error_ = why;
  for (auto& l : lanes_) l.ch->to_error();  // the HCA drops late writes into buffers we are about to hand back
  if (fd_ >= 0) {
    // The peer learns at once instead of by timeouts, and why (see kMaxCloseNoteBytes).
    if (!peer_gone_) send_close_note(fd_, why.message());
    ::shutdown(fd_, SHUT_RDWR);
  }
  if (has_pending())
    UCCL_WARN("%s: failing %zu sends and %zu receives: %s", describe().c_str(), sends_.size(), recvs_.size(),
              why.to_string().c_str());
  for (auto& op : sends_) {
    release_mrs(op.mr);
    fail(op.req, why);
  }
  for (auto& op : recvs_) {
    release_mrs(op.mr);
    if (op.scratch) op.scratch->busy = false;
    fail(op.req, why);
  }
  sends_.clear();
  recvs_.clear();
  ++activity_;
}

void VerbsEndpoint::fail_all(const Status& why) { fatal(why); }

void VerbsEndpoint::finalize(bool* moved) {
  while (!sends_.empty() && sends_.front().finished) {
    SendOp& op = sends_.front();
    release_mrs(op.mr);
    if (op.error.ok()) {
      counters_.bytes_sent += op.req->bytes;
      ++counters_.messages_sent;
      complete(op.req);
    } else {
      fail(op.req, op.error);
    }
    sends_.pop_front();
    *moved = true;
  }
  while (!recvs_.empty() && recvs_.front().done) {
    RecvOp& op = recvs_.front();
    release_data_credits(op);
    release_mrs(op.mr);
    if (op.scratch) op.scratch->busy = false;
    if (op.error.ok()) {
      counters_.bytes_received += op.req->bytes;
      complete(op.req);
    } else {
      fail(op.req, op.error);
    }
    recvs_.pop_front();
    *moved = true;
  }
}

// ---- posting work requests ---------------------------------------------------------------------

uint64_t VerbsEndpoint::credits() const {
  uint64_t limit = remote_.ctrl_slots + peer_freed_;
  return limit > ctrl_sent_ ? limit - ctrl_sent_ : 0;
}

bool VerbsEndpoint::ctrl_ok(bool may_hold) const {
  return can_post() && !free_send_slots_.empty() && sq_used_[0] < kMaxSendWr &&
         credits() >= (may_hold ? kCreditReserve + 1 : 1);
}

Status VerbsEndpoint::post_ctrl(CtrlMsg m, const void* payload, size_t len, int64_t final_of_send) {
  uint32_t slot = free_send_slots_.back();
  free_send_slots_.pop_back();
  m.magic = kCtrlMagic;
  m.credits = freed_;
  if (freed_ > advertised_) advertised_ = freed_;
  char* buf = ch_->send_slot(slot);
  std::memcpy(buf, &m, sizeof m);
  if (len) std::memcpy(buf + sizeof m, payload, len);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(buf);
  sge.length = static_cast<uint32_t>(sizeof m + len);
  sge.lkey = ch_->lkey();
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(WrKind::kCtrlSend, 0, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(ch_->qp(0), &wr, &bad);
  if (rc) {
    free_send_slots_.push_back(slot);
    return Status(Code::kSystemError, describe() + ": ibv_post_send (control) failed: " + std::strerror(rc),
                  peer_.peer_rank);
  }
  ++sq_used_[0];
  ++ctrl_sent_;
  slot_final_of_[slot] = final_of_send;
  ++activity_;
  return Status::Ok();
}

Status VerbsEndpoint::post_write(SendOp& op, const LanePiece& p) {
  const size_t local = qp_local_[p.qp];
  VerbsLane& lane = lanes_[p.lane];
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(static_cast<const char*>(op.req->data) + p.offset);
  sge.length = static_cast<uint32_t>(p.bytes);
  sge.lkey = op.mr[p.lane].lkey;
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(WrKind::kData, wr_qp_field(lane.id, local), op.seq);
  wr.sg_list = p.bytes ? &sge : nullptr;
  wr.num_sge = p.bytes ? 1 : 0;  // zero bytes: an adaptive message's closing immediate
  wr.opcode = p.with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.imm_data = htonl(static_cast<uint32_t>(op.seq));
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = op.cts.addr + p.offset;
  wr.wr.rdma.rkey = lane_rkey(op.cts, p.lane);
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(lane.ch->qp(local), &wr, &bad);
  if (rc)
    return Status(Code::kSystemError, describe() + ": ibv_post_send (RDMA write on " + lane.ch->device().name() +
                                          ") failed: " + std::strerror(rc), peer_.peer_rank);
  ++sq_used_[p.qp];
  load_.posted(p.qp, p.bytes);
  ++op.writes_inflight;
  if (p.with_imm && p.qp == 0) ++ctrl_sent_;  // it consumes one of the peer's control buffers
  ++activity_;
  return Status::Ok();
}

void VerbsEndpoint::repost(uint32_t slot) {
  Status s = ch_->post_ctrl_recv(slot);
  if (!s.ok()) return fatal(s);
  ++freed_;
}

void VerbsEndpoint::maybe_advertise_credits() {
  if (!can_post() || mbox_inflight_ || freed_ == advertised_ || sq_used_[0] >= kMaxSendWr) return;
  uint64_t unadvertised = freed_ - advertised_;
  uint64_t peer_credits = kCtrlSlots - unadvertised - held_;  // the peer's view, at best
  // Batch in quiet times; tell at once when the peer may be running short.
  if (unadvertised < kCtrlSlots / 4 && peer_credits > kCtrlSlots / 2) return;
  *ch_->mbox_src() = freed_;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(ch_->mbox_src());
  sge.length = sizeof(uint64_t);
  sge.lkey = ch_->lkey();
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(WrKind::kMailbox, 0, 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_.mbox_addr;
  wr.wr.rdma.rkey = remote_.mbox_rkey;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(ch_->qp(0), &wr, &bad);
  if (rc)
    return fatal(Status(Code::kSystemError, describe() + ": ibv_post_send (credit write) failed: " +
                                                std::strerror(rc), peer_.peer_rank));
  ++sq_used_[0];
  advertised_ = freed_;
  mbox_inflight_ = true;
  ++activity_;
}

}  // namespace uccl
