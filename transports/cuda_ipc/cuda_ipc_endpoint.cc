// The cuda_ipc endpoint (see cuda_ipc_transport.h for the protocol and why): set-up, the sending
// side, control records, progress and failure. The receiving side: cuda_ipc_receive.cc.
#include "transports/cuda_ipc/cuda_ipc_endpoint.h"

namespace uccl {
namespace cuda_ipc {
namespace {

constexpr size_t kKeepPinnedBytes = 64u << 20;   // free pinned stage blocks kept per peer

}  // namespace

CudaIpcEndpoint::CudaIpcEndpoint(std::unique_ptr<Transport> inner_transport, std::unique_ptr<Endpoint> inner,
                                 const PeerContext& peer, const CudaModule* mod, bool same_process)
    : inner_transport_(std::move(inner_transport)),
      inner_(std::move(inner)), peer_(peer), mod_(mod), cuda_(mod->backend), same_process_(same_process),
      pool_(mod->backend, kKeepPinnedBytes) {}

CudaIpcEndpoint::~CudaIpcEndpoint() {
  // Device work still queued reads or writes buffers this endpoint owns: let it finish.
  for (auto& kv : streams_) kv.first.first->synchronize(kv.second.get());
  // The inner endpoint fails its pending requests as it goes, and those live in our members:
  // it goes first, while they still exist.
  inner_.reset();
  for (auto& op : sends_) if (op->work.temp) op->work.backend->free(op->work.temp);
  for (auto& op : recvs_) if (op->work.temp) op->work.backend->free(op->work.temp);
  for (auto& kv : mappings_) mod_->ipc->close(kv.second, kv.first.second);
}

TransportKind CudaIpcEndpoint::kind() const { return static_cast<TransportKind>(4); }

std::string CudaIpcEndpoint::describe() const {
  return std::string("cuda_ipc") + (same_process_ ? " (same process)" : "") + " over " + inner_->describe();
}

void CudaIpcEndpoint::arm_wait(WaitSet* ws) {
  inner_->arm_wait(ws);
  // Device work is observed by polling its events: sleep briefly only.
  for (auto& op : recvs_) if (op->state == RecvOp::kDevice) ws->poll_only = true;
  for (auto& op : sends_) if (op->staging) ws->poll_only = true;
}

bool CudaIpcEndpoint::has_pending() const {
  return !sends_.empty() || !recvs_.empty() || !acks_out_.empty() || inner_->has_pending();
}

Result<DeviceStream*> CudaIpcEndpoint::stream_for(DeviceBackend* b, int ordinal) {
  auto key = std::make_pair(b, ordinal);
  auto it = streams_.find(key);
  if (it != streams_.end()) return it->second.get();
  auto s = b->create_stream(ordinal);
  if (!s.ok()) return s.status();
  DeviceStream* raw = s.value().get();
  streams_[key] = s.take();
  return raw;
}

Result<bool> CudaIpcEndpoint::work_done(DeviceWork& w) {
  if (!w.event) return true;
  auto q = w.backend->query(w.event.get());
  if (!q.ok() || !q.value()) return q;
  if (w.temp) w.backend->free(w.temp);
  w.temp = nullptr;
  w.event.reset();
  return true;
}

Result<void*> CudaIpcEndpoint::map_peer(const Ctrl& c, int ordinal) {
  if (c.direct) return reinterpret_cast<void*>(static_cast<uintptr_t>(c.x.offset));
  auto key = std::make_pair(c.x.buffer_id, ordinal);
  auto it = mappings_.find(key);
  if (it == mappings_.end()) {
    auto m = mod_->ipc->open(c.x, ordinal);
    if (!m.ok()) {
      return Status(Code::kSystemError, "cuda_ipc: cannot map the memory of " + peer_.describe() + " (device " +
                                            std::string(c.pci) + ") on device " + std::to_string(ordinal) +
                                            ": " + m.status().message() +
                                            " (GPUs without peer access: UCCL_CUDA_IPC=off)", peer_.peer_rank);
    }
    it = mappings_.emplace(key, m.value()).first;
  }
  return static_cast<void*>(static_cast<uint8_t*>(it->second) + c.x.offset);
}

// ---- sending -------------------------------------------------------------------------------

void CudaIpcEndpoint::post_send(SendRequest* r) {
  r->state = ReqState::kPending;  // re-posted requests (the tiny plan) must not look done
  if (failed_) return fail(r, error_);
  auto op = std::make_unique<SendOp>();
  op->r = r;
  op->ctrl.env = r->env;
  op->ctrl.bytes = r->bytes;
  const MemoryLoc loc = r->bytes ? locate_memory(r->data) : MemoryLoc{};
  if (is_cuda(loc) && same_process_) {
    op->ipc = true;
    op->ctrl.type = kIpc;
    op->ctrl.direct = 1;
    op->ctrl.x.offset = reinterpret_cast<uintptr_t>(r->data);
    op->ctrl.x.ordinal = loc.ordinal;
  } else if (is_cuda(loc)) {
    auto x = mod_->ipc->export_ptr(r->data);
    if (x.ok()) {
      op->ipc = true;
      op->ctrl.type = kIpc;
      op->ctrl.x = x.value();
      const std::string pci = mod_->ipc->pci_bus_id(loc.ordinal);
      std::strncpy(op->ctrl.pci, pci.c_str(), sizeof op->ctrl.pci - 1);
    } else if (x.status().code() != Code::kNotSupported) {
      return fail(r, x.status());
    }
  }
  if (!op->ipc) {
    op->ctrl.type = kInline;
    if (loc.is_device()) {  // device memory we cannot export: stage it through the host
      op->stage.get(&pool_, r->bytes);
      op->work.backend = loc.backend;
      auto s = stream_for(loc.backend, loc.ordinal);
      auto ev = loc.backend->create_event();
      Status st = !s.ok() ? s.status() : !ev.ok() ? ev.status() : Status::Ok();
      if (st.ok()) st = device_copy_async(loc.backend, op->stage.data(), r->data, r->bytes, CopyDir::kDeviceToHost, s.value());
      if (st.ok()) {
        op->work.event = ev.take();
        st = loc.backend->record(op->work.event.get(), s.value());
      }
      if (!st.ok()) return fail(r, st.with_context("cuda_ipc: staging a device send"));
      op->staging = true;
    }
  }
  sends_.push_back(std::move(op));
  pump_sends();
}

bool CudaIpcEndpoint::pump_sends() {
  bool moved = false;
  // Post to the inner endpoint in order: a send waits until every earlier one has posted.
  for (auto& up : sends_) {
    SendOp& op = *up;
    if (op.posted) continue;
    if (op.staging) {
      auto d = work_done(op.work);
      if (!d.ok()) {
        fail_everything(d.status());
        return true;
      }
      if (!d.value()) break;
      op.staging = false;
    }
    op.ctrl_req.data = &op.ctrl;
    op.ctrl_req.bytes = sizeof(Ctrl);
    op.ctrl_req.env = fixed_env();
    inner_->post_send(&op.ctrl_req);
    if (op.ctrl.type == kInline && op.r->bytes) {
      op.payload_req.data = op.stage.empty() ? op.r->data : op.stage.data();
      op.payload_req.bytes = op.r->bytes;
      op.payload_req.env = fixed_env();
      inner_->post_send(&op.payload_req);
    } else {
      complete(&op.payload_req);
    }
    if (op.ipc) op.ack_index = acks_expected_++;
    op.posted = true;
    moved = true;
  }
  post_ctrl_recv_if_needed();  // an ipc send waits for its ACK
  // Complete in order.
  while (!sends_.empty()) {
    SendOp& op = *sends_.front();
    if (!op.posted) break;
    for (Request* q : {static_cast<Request*>(&op.ctrl_req), static_cast<Request*>(&op.payload_req)})
      if (q->state == ReqState::kFailed) {
        fail_everything(q->error);
        return true;
      }
    if (op.ctrl_req.pending() || op.payload_req.pending()) break;
    if (op.ipc && acks_ <= op.ack_index) break;
    counters_.bytes_sent += op.r->bytes;
    counters_.messages_sent += 1;
    complete(op.r);
    sends_.pop_front();
    moved = true;
  }
  return moved;
}

// ---- control records -------------------------------------------------------------------------

bool CudaIpcEndpoint::awaiting_ctrl() const {
  if (acks_ < acks_expected_) return true;
  for (auto& op : recvs_) if (op->state == RecvOp::kNeedDesc) return arrived_.empty();
  return false;
}

void CudaIpcEndpoint::post_ctrl_recv_if_needed() {
  if (ctrl_posted_ || failed_ || !awaiting_ctrl()) return;
  ctrl_req_ = RecvRequest{};
  ctrl_req_.dst = &ctrl_in_;
  ctrl_req_.bytes = sizeof(Ctrl);
  ctrl_req_.expect = fixed_env();
  ctrl_posted_ = true;
  inner_->post_recv(&ctrl_req_);
}

bool CudaIpcEndpoint::pump_ctrl() {
  bool moved = false;
  while (ctrl_posted_ && !ctrl_req_.pending()) {
    ctrl_posted_ = false;
    moved = true;
    if (ctrl_req_.state == ReqState::kFailed) {
      fail_everything(ctrl_req_.error);
      return true;
    }
    const Ctrl c = ctrl_in_;
    if (c.magic != Ctrl{}.magic || c.type < kIpc || c.type > kAck) {
      fail_everything(Status(Code::kRemoteError, "cuda_ipc: " + peer_.describe() + " sent a malformed control record",
                             peer_.peer_rank));
      return true;
    }
    if (c.type == kAck) {
      ++acks_;
    } else {
      auto a = std::make_unique<Arrived>();
      a->ctrl = c;
      if (c.type == kInline && c.bytes) {
        // The payload is next on the inner endpoint: receive it now (into the user's buffer
        // if its receive is already waiting, else into a buffer of ours) so that later
        // control records (ACKs) are never stuck behind it.
        RecvOp* waiting = nullptr;
        for (auto& op : recvs_) if (op->state == RecvOp::kNeedDesc) { waiting = op.get(); break; }
        if (waiting && arrived_.empty()) {
          waiting->ctrl = c;
          start_recv(*waiting);
          a.reset();
        } else {
          a->buffer.get(&pool_, c.bytes);
          a->payload = std::make_unique<RecvRequest>();
          a->payload->dst = a->buffer.data();
          a->payload->bytes = c.bytes;
          a->payload->expect = fixed_env();
          inner_->post_recv(a->payload.get());
        }
      }
      if (a) arrived_.push_back(std::move(a));
    }
    post_ctrl_recv_if_needed();
  }
  return moved;
}

void CudaIpcEndpoint::send_ack() {
  auto a = std::make_unique<AckOut>();
  a->ctrl.type = kAck;
  a->req.data = &a->ctrl;
  a->req.bytes = sizeof(Ctrl);
  a->req.env = fixed_env();
  inner_->post_send(&a->req);
  acks_out_.push_back(std::move(a));
}

bool CudaIpcEndpoint::progress() {
  if (failed_) return false;
  bool moved = inner_->progress();
  moved |= pump_ctrl();
  moved |= pump_recvs();
  moved |= pump_sends();
  while (!acks_out_.empty() && !acks_out_.front()->req.pending()) {
    if (acks_out_.front()->req.state == ReqState::kFailed) {
      fail_everything(acks_out_.front()->req.error);
      return true;
    }
    acks_out_.pop_front();
    moved = true;
  }
  return moved;
}

void CudaIpcEndpoint::fail_everything(const Status& why) {
  if (failed_) return;
  failed_ = true;
  error_ = why;
  inner_->fail_all(why);
  // Queued device work may still read our stages: let it finish before they go.
  for (auto& kv : streams_) kv.first.first->synchronize(kv.second.get());
  for (auto& op : sends_) {
    if (op->work.temp) op->work.backend->free(op->work.temp);
    op->work.temp = nullptr;
    if (op->r->pending()) fail(op->r, why);
  }
  for (auto& op : recvs_) {
    if (op->work.temp) op->work.backend->free(op->work.temp);
    op->work.temp = nullptr;
    if (op->r->pending()) fail(op->r, why);
  }
  sends_.clear();
  recvs_.clear();
  arrived_.clear();
  acks_out_.clear();
  for (auto& kv : mappings_) mod_->ipc->close(kv.second, kv.first.second);
  mappings_.clear();
}

void CudaIpcEndpoint::fail_all(const Status& why) { fail_everything(why); }

}  // namespace cuda_ipc
}  // namespace uccl
