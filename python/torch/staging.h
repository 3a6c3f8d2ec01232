// Staging between the caller's tensors and the contiguous buffers uccl works on (host memory,
// or memory of a device uccl owns: buffer_for).
//
// Why: uccl wants one contiguous buffer per side, all of one call in one place. A contiguous CPU tensor is used as is;
// a non-contiguous one, a list of tensors, or a tensor of a staged accelerator (xpu, mps, hpu,
// mtia, PrivateUse1: convert.h) goes through a host buffer, filled by torch's own copies (for a
// device, its copy function on its current stream, which returns once the bytes are on the
// host). Outputs are copied back by the work's epilogues, which run only when the op succeeded,
// so a failed op leaves the caller's tensors as they were. Every buffer is kept alive by the work.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "convert.h"
#include "work.h"

namespace uccl_torch {

class UcclBackend;

// The contiguous buffer uccl works on for t (owned: a device backend of uccl owns t's memory,
// convert.h device_owned): t itself when it is a contiguous host tensor or contiguous memory uccl
// owns; a contiguous copy on t's device when uccl owns the memory but t is not contiguous
// (torch's copy, on the current stream, which the op is ordered after: every buffer of a call
// stays device memory); else a contiguous host buffer (a staged device's tensor goes there by
// torch's own device-to-host copy). copy_in: the buffer starts with t's values.
at::Tensor buffer_for(const at::Tensor& t, bool owned, bool copy_in);
// A buffer uccl may read with t's contents (buffer_for, kept alive by the work).
at::Tensor in_buf(UcclWork& w, const at::Tensor& t);
// A buffer uccl may write t's result into (buffer_for; copied back into t by the work's
// epilogue when it is not t); copy_in: the op also reads t (in-place ops).
at::Tensor out_buf(UcclWork& w, const at::Tensor& t, bool copy_in);
// One flat host buffer holding `parts` back to back (with copy_in, their contents).
at::Tensor pack(UcclWork& w, const std::vector<at::Tensor>& parts, const at::Tensor& like, bool copy_in);
// Epilogue: copies consecutive slices of flat back into parts.
void unpack_after(UcclWork& w, const at::Tensor& flat, const std::vector<at::Tensor>& parts);

// Chunk size of the pipelined staging of large device tensors (issue_staged_chunks).
constexpr int64_t kStageChunkBytes = 4 << 20;
// all_reduce of a large contiguous device tensor, copied out and issued chunk by chunk so that
// copying overlaps the network; false (nothing done) when t takes the plain path.
bool issue_staged_chunks(UcclBackend& b, UcclWork& w, const at::Tensor& t, const ReduceWire& rw, const char* op);

}  // namespace uccl_torch
