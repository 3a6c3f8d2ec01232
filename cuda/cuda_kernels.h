// Launchers of the CUDA reduce / scale / divide kernels (cuda/cuda_kernels.cu).
//
// Why this header has no CUDA types: the CUDA backend (cuda/cuda_backend.h) is ordinary C++
// compiled by the host compiler; only the .cu file goes through nvcc. Streams travel as
// void* (a cudaStream_t) and results as the cudaError_t value of the launch (0 = success).
//
// Copies are cudaMemcpyAsync (the copy engines, which also read a peer's IPC mapping), or the copy
// kernel below where uccl must keep off the engines (DeviceBackend::copy_by_kernel_async); no
// strided pack kernel exists because no schedule needs one.
// Semantics are those of cpp/base/reduce.h, element for element and bit for bit: the kernels
// instantiate the shared arithmetic of cpp/base/elementwise.h (fp16/bf16 in float, rounded
// once; NaN propagation; integer wrap-around; llround'ed integer factors; truncating integer
// division). dst may alias a or b (the same pointer), not partially overlap them.
// Launch: grid-stride loops over 16-byte vectors when dst, a and b are 16-byte aligned (the
// tail and unaligned buffers element by element), at most a few blocks per SM.
// The caller has made the stream's device current. count == 0 launches nothing.
#pragma once

#include <cstddef>

#include "uccl/types.h"

namespace uccl {
namespace cuda {

int launch_reduce(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                  void* stream);
// dst[0, bytes) = src[0, bytes) by the device's cores (16-byte vectors where both are 16-byte
// aligned, bytes otherwise); either side may be device memory, a peer's IPC mapping or mapped
// pinned host memory (its device address). The ranges must not overlap.
int launch_copy(void* dst, const void* src, size_t bytes, void* stream);
int launch_scale(void* dst, const void* src, size_t count, DataType dt, double factor, void* stream);
int launch_divide(void* dst, const void* src, size_t count, DataType dt, int n, void* stream);
// One thread on `stream` that returns once the 32-bit word at `flag` (a device address of mapped
// pinned host memory, which the host sets to 1) is >= 1: a stream wait the way NCCL's kernels
// wait for their proxy, as a running kernel polling host memory (acquire, system scope, with a
// backoff of up to ~4 us between reads) instead of a semaphore acquire in the stream's hardware
// queue (cuStreamWaitValue32). UCCL_STREAM_WAIT=kernel; cuda_signals.cc says why.
int launch_wait_flag(const void* flag, void* stream);
// Loads every kernel above on the current device now (cudaFuncGetAttributes), so that no launch
// loads one later: with CUDA's lazy loading a load may synchronize the device (cuda_signals.cc).
void preload_kernels();

}  // namespace cuda
}  // namespace uccl
