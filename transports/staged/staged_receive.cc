// The staged endpoint's receiving side (see staged_endpoint.h for the why and the rules): the
// chunks of a receive into device memory, posted ahead into bounce slots (or, on shared slots,
// taking whichever form each chunk comes in), landed on the device in order (copied, or reduced
// by the device's kernel), and their slots given back once the device is done with them.
#include "transports/staged/staged_endpoint.h"

#include <cstring>

#include "base/net.h"
#include "base/reduce.h"
#include "base/signal_safe_memory.h"

namespace uccl {

void StagedEndpoint::post_chunk_recv(Op& op, Chunk& c) {
  c.t = now_s();
  inner_->post_recv(&c.r);
  c.stage = Stage::kPosted;
  ++op.started;
  ++op.posted;
}

bool StagedEndpoint::advance_device_recv(Dir& d, Op& op, bool ready, bool may_post) {
  bool moved = false;
  const size_t n = op.chunks.size();
  // 1. receives into free slots, in order.
  while (ready && may_post && op.error.ok() && op.started < n) {
    Chunk& c = op.chunks[op.started];
    Slot* sl = acquire(d, c.len);
    if (!sl) break;
    c.slot = sl;
    c.r.dst = sl->host;
    c.r.bytes = c.len;
    c.r.expect = op.r->expect;
    c.r.reduce = false;
    c.r.dtype = op.r->dtype;
    c.r.op = op.r->op;
    post_chunk_recv(op, c);
    moved = true;
  }
  // 2. a landed chunk goes to the device (and is reduced there), in order.
  for (size_t i = op.finished; i < op.posted; ++i) {
    Chunk& c = op.chunks[i];
    if (c.stage != Stage::kPosted) continue;
    if (c.r.pending()) break;
    if (c.r.state == ReqState::kDone && op.error.ok() && !chunk_free(op, c)) break;  // posting ahead: not read yet
    moved = true;
    if (c.r.state == ReqState::kFailed || !op.error.ok()) {
      keep_first_error(op, c.r);
      c.stage = Stage::kLanding;  // nothing queued: its (old) event is complete
      continue;
    }
    Status s = land_on_device(d, op, c, c.slot->host);
    if (!s.ok() && op.error.ok()) op.error = s.with_context("staging a receive to the device");
    c.stage = Stage::kLanding;
  }
  // 3. chunks on the device give their slot back.
  if (give_back_landed(d, op)) moved = true;
  return moved;
}

Status StagedEndpoint::land_on_device(Dir& d, Op& op, Chunk& c, const char* from) {
  size_t hop_bytes = 0;
  char* hop = hop_for(c.slot, from, &hop_bytes);
  const double now = now_s();
  times_.data_wait += now - c.t;
  c.t = now;
  if (hop && hop_bytes < c.len) {  // the device's hop: by pieces, now (hop_for)
    std::unique_lock<std::mutex> lock = hop_lock(hop);
    const size_t piece = SignalSafeMemory::kMinBlock;
    for (size_t off = 0; off < c.len; off += piece) {
      const size_t n = std::min(piece, c.len - off);
      std::memcpy(hop, from + off, n);
      UCCL_RETURN_IF_ERROR(land_range(d, op, c, off, hop, n));
      UCCL_RETURN_IF_ERROR(backend_->synchronize(d.stream.get()));
    }
  } else {
    if (hop) {  // the CPU's half of the hop first
      std::memcpy(hop, from, c.len);
      from = hop;
    }
    UCCL_RETURN_IF_ERROR(land_range(d, op, c, 0, from, c.len));
  }
  return backend_->record(c.slot->ev.get(), d.stream.get());
}

Status StagedEndpoint::land_range(Dir& d, Op& op, Chunk& c, size_t off, const char* from, size_t len) {
  char* dst = static_cast<char*>(op.r->dst) + c.off + off;
  const char* acc = op.r->acc ? static_cast<const char*>(op.r->acc) + c.off + off : dst;
  const size_t count = op.r->reduce ? len / dtype_size(op.r->dtype) : 0;
  if (!op.r->reduce) return device_copy_async(backend_, dst, from, len, CopyDir::kHostToDevice, d.stream.get());
  if (const void* view = backend_->reduces_from_host() ? backend_->kernel_view_of_host(from, ordinal_) : nullptr) {
    // Zero-copy: the kernel reads the chunk out of its slot (one pass over the device's data
    // instead of a copy to a temporary and a second pass).
    return backend_->reduce_async(dst, acc, view, count, op.r->dtype, op.r->op, d.stream.get());
  }
  UCCL_RETURN_IF_ERROR(device_temp(c.slot));
  char* tmp = static_cast<char*>(c.slot->dev) + off;
  UCCL_RETURN_IF_ERROR(device_copy_async(backend_, tmp, from, len, CopyDir::kHostToDevice, d.stream.get()));
  return backend_->reduce_async(dst, acc, tmp, count, op.r->dtype, op.r->op, d.stream.get());
}

bool StagedEndpoint::advance_shared_recv(Dir& d, Op& op, bool may_post) {
  bool moved = false;
  const size_t n = op.chunks.size();
  const bool device = op.loc.is_device();
  if (device && may_post && op.error.ok() && op.started < n) {
    Status s = ensure_device(op.loc);
    if (!s.ok() && s.code() != Code::kTimeout) op.error = s;
  }
  const bool ready = !device || (backend_ == op.loc.backend && ordinal_ == op.loc.ordinal && in_.stream);
  // 1. Receives on the inner endpoint, posted ahead. Each takes whichever form its chunk comes
  //    in: the bytes (straight into the user's buffer, reduced on the way as on a plain pair; a
  //    device's into a bounce slot) or a note (RecvRequest::alt_dst).
  while (ready && may_post && op.error.ok() && op.gone.ok() && op.started < n) {
    Chunk& c = op.chunks[op.started];
    // Posting ahead: a host buffer's chunk is written as it arrives, so it is posted only once
    // the guard send read those bytes; a device chunk waits in its slot instead (step 2).
    if (!device && !chunk_free(op, c)) break;
    if (device && !(c.slot = acquire(d, c.len))) break;
    c.r.expect = op.r->expect;
    c.r.dtype = op.r->dtype;
    c.r.op = op.r->op;
    c.r.bytes = c.len;
    if (device) {
      c.r.dst = c.slot->host;
    } else {
      c.r.dst = static_cast<char*>(op.r->dst) + c.off;
      c.r.reduce = op.r->reduce;
      c.r.acc = op.r->acc ? static_cast<const char*>(op.r->acc) + c.off : nullptr;
    }
    c.r.alt_dst = &c.note;
    c.r.alt_bytes = sizeof(SlotNote);
    c.r.alt_mark = kSlotNoteMark;
    post_chunk_recv(op, c);
    moved = true;
  }
  // 2. A landed chunk is read out of the peer's slot or the local one, in order.
  for (size_t i = op.finished; i < op.posted; ++i) {
    Chunk& c = op.chunks[i];
    if (c.stage != Stage::kPosted) continue;
    if (c.r.pending()) break;
    if (device && c.r.state == ReqState::kDone && op.error.ok() && !chunk_free(op, c)) break;  // posting ahead
    moved = true;
    c.stage = Stage::kLanding;
    if (c.r.state == ReqState::kFailed) {
      keep_first_error(op, c.r);
      continue;
    }
    c.via_slot = c.r.took_alt;
    const char* from = device ? c.slot->host : nullptr;
    if (c.via_slot) {
      // A note that arrived is consumed in step 3 whatever becomes of the op, or the sender
      // would wait for its slot forever.
      Result<const char*> src = peer_slots_.open(c.note);
      if (src.ok()) c.src = src.value();
      retire_peer_mapping();  // the sender made a new segment: let the old one go
      if (!op.error.ok()) continue;
      // The segment is gone: the peer failed (Op::gone; finish() asks the inner endpoint why).
      if (!src.ok() && src.status().code() == Code::kNotSupported) {
        if (op.gone.ok()) {
          op.gone = Status(Code::kRemoteError,
                           "rank " + std::to_string(peer_rank_) + " removed the staging slots it had just named (it "
                               "failed or exited): " + src.status().message(),
                           peer_rank_);
          op.gone_at = now_s();
        }
        continue;
      }
      if (!src.ok()) {
        op.error = Status(src.status().code(), src.status().message(), peer_rank_);
        continue;
      }
      if (c.note.bytes != c.len) {
        op.error = Status(Code::kMismatch,
                          "rank " + std::to_string(peer_rank_) + " sent a staged chunk of " +
                              std::to_string(c.note.bytes) + " bytes where " + std::to_string(c.len) +
                              " were expected (the two ranks passed messages of different sizes)",
                          peer_rank_);
        continue;
      }
      from = c.src;
      if (!device) {  // a host receive reads the slot itself: one copy (or reduce) on this CPU
        char* dst = static_cast<char*>(op.r->dst) + c.off;
        if (!op.r->reduce) std::memcpy(dst, from, c.len);
        else reduce(dst, op.r->acc ? static_cast<const char*>(op.r->acc) + c.off : dst, from,
                    c.len / dtype_size(op.r->dtype), op.r->dtype, op.r->op);
        continue;
      }
      register_once(op, peer_slots_.base(), peer_slots_.bytes(), &peer_slots_registered_);
    }
    if (!device || !op.error.ok()) continue;  // a plain chunk landed in the user's buffer
    Status s = land_on_device(d, op, c, from);
    if (!s.ok() && op.error.ok()) op.error = s.with_context("staging a receive to the device");
  }
  // 3. Chunks whose copies are done give back their slot, and the peer's.
  if (give_back_landed(d, op)) moved = true;
  finish(op, false);
  return moved;
}

bool StagedEndpoint::give_back_landed(Dir& d, Op& op) {
  bool moved = false;
  while (op.finished < op.posted && op.chunks[op.finished].stage == Stage::kLanding) {
    Chunk& c = op.chunks[op.finished];
    if (c.slot) {  // its copy (or reduce) to the device is queued: done when its event is
      Result<bool> q = backend_->query(c.slot->ev.get());
      if (!q.ok() && op.error.ok()) op.error = q.status().with_context("staging a receive to the device");
      if (q.ok() && !q.value()) break;
      if (q.ok() && op.error.ok()) {
        times_.to_device += now_s() - c.t;
        ++times_.received;
      }
      release(d, c.slot);
    }
    if (c.src) peer_slots_.consume(c.note);  // read out of the peer's slot: the sender may reuse it
    if (op.error.ok()) op.r->delivered = c.off + c.len;  // (a send posted ahead may read these bytes now)
    c.stage = Stage::kDone;
    ++op.finished;
    moved = true;
  }
  return moved;
}

}  // namespace uccl
