// The cuda_ipc endpoint's receiving side (see cuda_ipc_transport.h for the protocol): a receive
// takes its descriptor, then either maps the sender's allocation and copies or reduces out of it
// on this rank's device (kIpc), or lands the inline payload (in place, or through a host stage
// for a device destination).
#include "transports/cuda_ipc/cuda_ipc_endpoint.h"

#include <cstring>

#include "base/reduce.h"

namespace uccl {
namespace cuda_ipc {
namespace {

constexpr size_t kMaxMappings = 64;  // per peer

}  // namespace

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
                                                c.bytes / dtype_size(r->dtype), r->dtype, r->op, s.value())
                          : device_copy_async(cuda_, r->dst, src.value(), c.bytes, CopyDir::kDeviceToDevice, s.value());
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
  Status st = device_copy_async(cuda_, op.stage.data(), src.value(), c.bytes, CopyDir::kDeviceToHost, s.value());
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
    if (r->reduce) reduce(r->dst, r->acc ? r->acc : r->dst, data, bytes / dtype_size(r->dtype), r->dtype, r->op);
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
    st = device_copy_async(b, r->dst, data, bytes, CopyDir::kHostToDevice, s.value());
  } else {
    auto t = b->alloc(dl.ordinal, bytes);
    if (!t.ok()) return t.status();
    op.work.temp = t.value();
    st = device_copy_async(b, op.work.temp, data, bytes, CopyDir::kHostToDevice, s.value());
    if (st.ok())
      st = b->reduce_async(r->dst, r->acc ? r->acc : r->dst, op.work.temp, bytes / dtype_size(r->dtype), r->dtype,
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

}  // namespace cuda_ipc
}  // namespace uccl
