// The CUDA backend's signals (cuda/cuda_backend.h): a word of mapped pinned memory the host
// raises and a stream waits on (cuStreamWaitValue32, or a polling kernel), kept until the wait
// has passed; and why such waits are not yet called safe (signal_waits_safe).
#include <cuda.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"

namespace uccl {
namespace cuda {

Result<std::shared_ptr<DeviceSignal>> CudaBackend::create_signal(int ordinal) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
  if (!driver().stream_wait_value32) return NotSupported("cuda: the driver lacks cuStreamWaitValue32");
  reap_signals();
  Result<SignalWords::Word> w = signal_words().take();
  if (!w.ok()) return w.status();
  mark_context();
  return std::shared_ptr<DeviceSignal>(std::make_shared<CudaSignal>(w.value()));
}

// kSignal: cuStreamWaitValue32, a semaphore acquire that blocks the stream's hardware queue.
// kKernel: a one-thread kernel polling the word (cuda_kernels.h): the queue moves on and
// only that stream's later work waits, as behind any running kernel - NCCL's way of waiting
// for the host. Either relies on uccl's copies running as kernels meanwhile (device.h,
// device_copy_async); tests/gpu checks both.
Status CudaBackend::stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) {
  auto cs = std::dynamic_pointer_cast<CudaSignal>(sig);
  if (!cs) return InvalidArgument("cuda: not a CUDA signal");
  if (how != StreamWaitMode::kSignal && how != StreamWaitMode::kKernel)
    return InvalidArgument(std::string("cuda: a stream cannot wait by '") + stream_wait_mode_name(how) + "'");
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  preload_kernels(s->ordinal());
  // Under the lock of the synchronizing memory calls: none may be waiting while this is queued.
  return mem_.enqueue_wait([&]() -> Status {
    if (how == StreamWaitMode::kKernel) {
      UCCL_RETURN_IF_ERROR(launched("stream wait kernel",
                                    launch_wait_flag(reinterpret_cast<const void*>(cs->device_address()), raw(s))));
    } else {
      CUresult r = driver().stream_wait_value32(reinterpret_cast<CUstream>(raw(s)), cs->device_address(), 1,
                                                CU_STREAM_WAIT_VALUE_GEQ);
      if (r != CUDA_SUCCESS)
        return Status(Code::kSystemError, "cuda: cuStreamWaitValue32 failed (CUresult " + std::to_string(r) + ")");
    }
    // The word must outlive the wait: keep the signal until an event recorded behind it completed.
    cudaEvent_t done = nullptr;
    if (cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) return cuda_error("cudaEventCreate", e);
    if (cudaError_t e = cudaEventRecord(done, raw(s))) {
      cudaEventDestroy(done);
      return cuda_error("cudaEventRecord", e);
    }
    std::lock_guard<std::mutex> lock(signals_mu_);
    waiting_signals_.push_back({cs, done, s->ordinal()});
    return Status::Ok();
  });
}

// CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY, PyTorch's default), and loading one may
// synchronize the device: the first reduce launched by the progress thread while a user's
// stream waits on our signal would wait for that stream, which waits for the reduce. Loaded
// here, on the caller's thread, before any wait on the device is queued (NCCL does the same
// at init with cudaFuncGetAttributes).
void CudaBackend::preload_kernels(int ordinal) {
  if (ordinal < 0 || ordinal >= 64) return;
  std::call_once(preloaded_[ordinal], [] { cuda::preload_kernels(); });
}

// Never, for now (device.h): the wait is a flag only the host raises, and the device work that
// completes the operation is queued after it, on other streams, a dependency CUDA cannot see.
bool CudaBackend::signal_waits_safe(std::string* why) const {
  if (!available(nullptr)) return true;
  if (why) {
    *why = "CUDA cannot see that a stream waiting on uccl's flag (cuStreamWaitValue32) depends on device work "
           "queued after the wait, and may serialize the two (NVIDIA's warning on stream memory operations; "
           "on an H200 a broadcast into a fresh tensor hung so, with eager module loading too: a copy queued "
           "behind the wait holding the copy engines, it seems; uccl's copies by kernel are to be checked "
           "on a GPU)";
    if (probe_.lazy_loading)
      *why += "; and under lazy module loading a kernel's first launch waits for the whole device to drain";
    *why += ". The host waits for the operation; UCCL_STREAM_WAIT=signal|kernel queues the stream wait anyway";
  }
  return false;
}

// Whether a stream still waits (or may still wait) on one of our signals.
bool CudaBackend::waits_outstanding() {
  reap_signals();
  std::lock_guard<std::mutex> lock(signals_mu_);
  return !waiting_signals_.empty();
}

// Drops the signals whose streams are past their wait (their event completed).
void CudaBackend::reap_signals() {
  std::lock_guard<std::mutex> lock(signals_mu_);
  for (size_t i = 0; i < waiting_signals_.size();) {
    WaitingSignal& w = waiting_signals_[i];
    DeviceGuard g;
    g.set(w.ordinal);
    if (cudaEventQuery(w.done) == cudaErrorNotReady) {
      cudaGetLastError();
      ++i;
      continue;
    }
    cudaEventDestroy(w.done);
    waiting_signals_[i] = std::move(waiting_signals_.back());
    waiting_signals_.pop_back();
  }
}

}  // namespace cuda
}  // namespace uccl
