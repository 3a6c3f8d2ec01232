// Host buffers for the collectives: contiguous staging of non-contiguous tensors and lists,
// and of tensors of accelerators that uccl moves through host memory (convert.h: staged_device).
#include "staging.h"

#include <algorithm>

#include "backend.h"

namespace uccl_torch {

at::Tensor buffer_for(const at::Tensor& t, bool owned, bool copy_in) {
  if (t.is_contiguous() && (t.is_cpu() || owned)) return t;
  if (owned) return copy_in ? t.contiguous() : at::empty(t.sizes(), t.options());
  return copy_in ? host_contiguous(t) : at::empty(t.sizes(), t.options().device(at::kCPU));
}

at::Tensor in_buf(UcclWork& w, const at::Tensor& t) {
  const bool owned = device_owned(t);  // one lookup: it asks the device backend's driver
  if (owned) w.use_device(t.device());
  at::Tensor b = buffer_for(t, owned, true);
  w.keep_alive(b);
  return b;
}

at::Tensor out_buf(UcclWork& w, const at::Tensor& t, bool copy_in) {
  const bool owned = device_owned(t);
  if (owned) w.use_device(t.device());
  at::Tensor b = buffer_for(t, owned, copy_in);
  w.keep_alive(b);
  if (!b.is_same(t)) w.add_epilogue([t, b]() mutable { copy_back(t, b); });
  return b;
}

// One flat buffer holding `parts` back to back; with copy_in their contents are copied in. On
// the device of `like` when uccl owns that device's memory (the copies are torch's, on the
// current stream, which the op is ordered after), else in host memory.
at::Tensor pack(UcclWork& w, const std::vector<at::Tensor>& parts, const at::Tensor& like, bool copy_in) {
  int64_t total = 0;
  for (auto& p : parts) total += p.numel();
  const bool on_device = device_owned(like);
  if (on_device) w.use_device(like.device());
  at::Tensor flat = at::empty({total}, on_device ? like.options() : like.options().device(at::kCPU));
  if (copy_in) {
    int64_t off = 0;
    for (auto& p : parts) {
      flat.narrow(0, off, p.numel()).copy_(p.reshape({-1}));
      off += p.numel();
    }
  }
  w.keep_alive(flat);
  return flat;
}

// Epilogue: copy consecutive slices of flat back into parts.
void unpack_after(UcclWork& w, const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  w.add_epilogue([flat, parts]() mutable {
    int64_t off = 0;
    for (auto& p : parts) {
      copy_back(p, flat.narrow(0, off, p.numel()).view(p.sizes()));
      off += p.numel();
    }
  });
}

// Staged all_reduce of a large device tensor, pipelined: the tensor is copied to the host in
// chunks (torch's device-to-host copy, which returns once the chunk is there) and each chunk's
// all_reduce is issued as soon as it landed, so copying chunk k+1 overlaps the network work on
// chunk k. The result goes back in one copy after every chunk succeeded (an epilogue), so a
// failure leaves the caller's tensor as it was. Returns false (nothing done) for tensors that
// take the plain path: host tensors, non-contiguous ones, and those of at most one chunk.
bool issue_staged_chunks(UcclBackend& b, UcclWork& w, const at::Tensor& t, const ReduceWire& rw, const char* op) {
  const int64_t esize = t.element_size();
  if (t.is_cpu() || device_direct(t) || !t.is_contiguous() || t.numel() * esize <= kStageChunkBytes) return false;
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU));
  w.keep_alive(host);
  at::Tensor tf = t.view({-1}), hf = host.view({-1});
  const int64_t chunk = kStageChunkBytes / esize;
  for (int64_t off = 0; off < t.numel(); off += chunk) {
    const int64_t n = std::min(chunk, t.numel() - off);
    at::Tensor h = hf.narrow(0, off, n);
    try {
      h.copy_(tf.narrow(0, off, n));
    } catch (const std::exception& e) {
      if (!w.has_ops()) throw;  // nothing issued yet: the group stays usable
      // The peers run every chunk; this rank cannot any more. Abort, so that they fail now
      // (naming this rank) instead of at their timeout, and nothing lines up wrongly later.
      w.start();
      b.abort();
      C10_THROW_ERROR(DistBackendError, c10::str("uccl ", op, ": copying chunk ", off / chunk,
                                                 " of the device tensor to the host failed after earlier chunks were "
                                                 "issued; the process group was aborted: ", e.what()));
    }
    uccl::AllReduceArgs a;
    a.send = a.recv = h.data_ptr();
    a.count = rw.wire.count(n);
    a.dtype = rw.wire.dtype;
    a.op = rw.op;
    a.scalar = rw.scalar;
    b.add_op(w, b.comm(op).all_reduce(a));
  }
  w.add_epilogue([t, host] { copy_back(t, host); });
  return true;
}

}  // namespace uccl_torch
