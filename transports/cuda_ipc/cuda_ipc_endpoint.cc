// The cuda_ipc endpoint (see cuda_ipc_transport.h for the protocol and why).
#include "transports/cuda_ipc/cuda_ipc_endpoint.h"

#include <cstring>

#include "base/reduce.h"

namespace uccl {
namespace cuda_ipc {
namespace {

size_t dtype_bytes(DataType dt) {
  switch (dt) {
    case DataType::kInt8: case DataType::kUint8: return 1;
    case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt32: case DataType::kFloat32: return 4;
    default: return 8;
  }
}
constexpr size_t kMaxMappings = 64;              // per peer
constexpr size_t kKeepPinnedBytes = 64u << 20;   // free pinned stage blocks kept per peer

bool is_cuda(const MemoryLoc& l) { return l.kind == MemoryKind::kCuda && l.backend; }

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
      if (st.ok()) st = loc.backend->copy_async(op->stage.data(), r->data, r->bytes, CopyDir::kDeviceToHost, s.value());
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

// ---- receiving -------------------------------------------------------------------------------

void CudaIpcEndpoint::post_recv(RecvRequest* r) {
  r->state = ReqState::kPending;
  if (failed_) return fail(r, error_);
  auto op = std::make_unique<RecvOp>();
  op->r = r;
  recvs_.push_back(std::move(op));
  pump_recvs();
}

// The descriptor of op is known (op.ctrl, or op.early): start moving its bytes.
void CudaIpcEndpoint::start_recv(RecvOp& op) {
  RecvRequest* r = op.r;
  const Ctrl& c = op.ctrl;
  if (c.bytes != r->bytes || !c.env.same_call(r->expect)) {
    // Fatal for the pair, as on every transport: the streams no longer agree.
    fail_everything(mismatch_error(peer_, r->expect, r->bytes, c.env, c.bytes));
    return;
  }
  if (c.type == kIpc) {
    Status st = start_ipc_read(op);
    if (!st.ok()) fail_everything(st);
    return;
  }
  if (c.bytes == 0) {
    op.state = RecvOp::kDone;
    complete(r);
    return;
  }
  if (op.early) {  // the payload is (being) received into our buffer
    op.state = RecvOp::kInnerRecv;
    return;
  }
  const MemoryLoc dl = locate_memory(r->dst);
  const MemoryLoc al = r->acc ? locate_memory(r->acc) : dl;
  op.inner = RecvRequest{};
  op.inner.bytes = c.bytes;
  op.inner.expect = fixed_env();
  if (!dl.is_device() && !al.is_device()) {  // host: straight into the user's buffer, fused reduce
    op.inner.dst = r->dst;
    op.inner.reduce = r->reduce;
    op.inner.acc = r->acc;
    op.inner.dtype = r->dtype;
    op.inner.op = r->op;
  } else {
    op.stage.get(&pool_, c.bytes);
    op.inner.dst = op.stage.data();
    op.stage_pending = true;
  }
  op.state = RecvOp::kInnerRecv;
  inner_->post_recv(&op.inner);
}

Status CudaIpcEndpoint::start_ipc_read(RecvOp& op) {
  RecvRequest* r = op.r;
  const Ctrl& c = op.ctrl;
  op.ack_after = true;
  if (c.bytes == 0) {
    op.state = RecvOp::kDevice;
    return Status::Ok();
  }
  const MemoryLoc dl = locate_memory(r->dst);
  const MemoryLoc al = r->acc ? locate_memory(r->acc) : dl;
  op.work.backend = cuda_;
  auto ev = cuda_->create_event();
  if (!ev.ok()) return ev.status();
  op.work.event = ev.take();
  if (is_cuda(dl) && (!r->reduce || is_cuda(al))) {
    // The fast path: the peer's memory straight into ours on our device (copy engine or the
    // reduce kernel reading over NVLink / PCIe peer access; one GPU: plain device memory).
    auto src = map_peer(c, dl.ordinal);
    if (!src.ok()) return src.status();
    auto s = stream_for(cuda_, dl.ordinal);
    if (!s.ok()) return s.status();
    Status st = r->reduce ? cuda_->reduce_async(r->dst, r->acc ? r->acc : r->dst, src.value(),
                                                c.bytes / dtype_bytes(r->dtype), r->dtype, r->op, s.value())
                          : cuda_->copy_async(r->dst, src.value(), c.bytes, CopyDir::kDeviceToDevice, s.value());
    if (st.ok()) st = cuda_->record(op.work.event.get(), s.value());
    op.state = RecvOp::kDevice;
    return st;
  }
  // Host (or another device's) destination: device-to-host into a stage, delivered after.
  int ordinal = c.direct ? c.x.ordinal : mod_->ipc->device_by_pci(c.pci);
  if (ordinal < 0) ordinal = 0;
  auto src = map_peer(c, ordinal);
  if (!src.ok()) return src.status();
  auto s = stream_for(cuda_, ordinal);
  if (!s.ok()) return s.status();
  op.stage.get(&pool_, c.bytes);
  op.stage_pending = true;
  Status st = cuda_->copy_async(op.stage.data(), src.value(), c.bytes, CopyDir::kDeviceToHost, s.value());
  if (st.ok()) st = cuda_->record(op.work.event.get(), s.value());
  op.state = RecvOp::kDevice;
  return st;
}

// Puts staged bytes where the receive wants them: host memory now, device memory by its
// backend's copy (and reduce kernel) on our stream for that device.
Status CudaIpcEndpoint::deliver_stage(RecvOp& op, const uint8_t* data) {
  RecvRequest* r = op.r;
  const MemoryLoc dl = locate_memory(r->dst);
  const size_t bytes = op.ctrl.bytes;
  if (!dl.is_device()) {
    const MemoryLoc al = r->acc ? locate_memory(r->acc) : dl;
    if (al.is_device()) return InvalidArgument("cuda_ipc: a host destination with a device accumulator");
    if (r->reduce) reduce(r->dst, r->acc ? r->acc : r->dst, data, bytes / dtype_bytes(r->dtype), r->dtype, r->op);
    else std::memcpy(r->dst, data, bytes);
    op.state = RecvOp::kDone;
    return Status::Ok();
  }
  DeviceBackend* b = dl.backend;
  auto s = stream_for(b, dl.ordinal);
  if (!s.ok()) return s.status();
  auto ev = b->create_event();
  if (!ev.ok()) return ev.status();
  op.work = DeviceWork{};
  op.work.backend = b;
  op.work.event = ev.take();
  Status st;
  if (!r->reduce) {
    st = b->copy_async(r->dst, data, bytes, CopyDir::kHostToDevice, s.value());
  } else {
    auto t = b->alloc(dl.ordinal, bytes);
    if (!t.ok()) return t.status();
    op.work.temp = t.value();
    st = b->copy_async(op.work.temp, data, bytes, CopyDir::kHostToDevice, s.value());
    if (st.ok())
      st = b->reduce_async(r->dst, r->acc ? r->acc : r->dst, op.work.temp, bytes / dtype_bytes(r->dtype), r->dtype,
                           r->op, s.value());
  }
  if (st.ok()) st = b->record(op.work.event.get(), s.value());
  op.state = RecvOp::kDevice;
  return st;
}

bool CudaIpcEndpoint::pump_recvs() {
  bool moved = false;
  // Match descriptors that came early with receives that wait for one, in order.
  for (auto& up : recvs_) {
    if (up->state != RecvOp::kNeedDesc) continue;
    if (arrived_.empty()) break;
    std::unique_ptr<Arrived> a = std::move(arrived_.front());
    arrived_.pop_front();
    up->ctrl = a->ctrl;
    if (a->payload) up->early = std::move(a);
    start_recv(*up);
    moved = true;
  }
  post_ctrl_recv_if_needed();
  for (auto& up : recvs_) {
    RecvOp& op = *up;
    if (failed_) return true;
    if (op.state == RecvOp::kInnerRecv) {
      RecvRequest* q = op.early ? op.early->payload.get() : &op.inner;
      if (q->pending()) continue;
      if (q->state == ReqState::kFailed) {
        fail_everything(q->error);
        return true;
      }
      moved = true;
      Status st = Status::Ok();
      if (op.early) st = deliver_stage(op, op.early->buffer.data());
      else if (op.stage_pending) st = deliver_stage(op, op.stage.data());
      else op.state = RecvOp::kDone;
      op.stage_pending = false;
      if (!st.ok()) {
        fail_everything(st.with_context("cuda_ipc: delivering a received message"));
        return true;
      }
    }
    if (op.state == RecvOp::kDevice) {
      auto d = work_done(op.work);
      if (!d.ok()) {
        fail_everything(d.status().with_context("cuda_ipc: device work of a receive"));
        return true;
      }
      if (!d.value()) continue;
      moved = true;
      if (op.ack_after) {  // the peer's buffer has been read: release its send
        op.ack_after = false;
        send_ack();
      }
      if (op.stage_pending) {  // an IPC read into a stage: now deliver it
        op.stage_pending = false;
        Status st = deliver_stage(op, op.stage.data());
        if (!st.ok()) {
          fail_everything(st.with_context("cuda_ipc: delivering a received message"));
          return true;
        }
        if (op.state == RecvOp::kDevice) continue;
      } else {
        op.state = RecvOp::kDone;
      }
    }
  }
  // Complete in order.
  while (!recvs_.empty() && recvs_.front()->state == RecvOp::kDone) {
    RecvRequest* r = recvs_.front()->r;
    if (r->pending()) {
      counters_.bytes_received += r->bytes;
      complete(r);
    }
    recvs_.pop_front();
    moved = true;
  }
  // A mapping keeps the peer's allocation alive on its GPU even after the peer freed it. When
  // the peer keeps sending from new allocations, drop them all at a quiet moment (nothing in
  // flight reads them); the ones still in use are mapped again on their next message.
  if (mappings_.size() > kMaxMappings && recvs_.empty()) {
    for (auto& kv : mappings_) mod_->ipc->close(kv.second, kv.first.second);
    mappings_.clear();
  }
  return moved;
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
