// The CUDA backend's streams, events and signals (cuda/cuda_backend.h makes them; nothing outside
// libuccl_cuda.so sees these types). A stream is a cudaStream_t, owned or wrapped; an event is a
// cudaEvent_t created lazily on the device of the stream it is first recorded on; a signal is a
// word of mapped pinned host memory that a stream waits on with cuStreamWaitValue32.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/device.h"
#include "cuda/cuda_backend_internal.h"

namespace uccl {
namespace cuda {

class CudaStream final : public DeviceStream {
 public:
  CudaStream(int ordinal, cudaStream_t s, bool external) : ordinal_(ordinal), s_(s), external_(external) {}
  ~CudaStream() override {
    if (!external_ && s_) {
      DeviceGuard g;
      g.set(ordinal_);
      cudaStreamDestroy(s_);
    }
  }
  int ordinal() const override { return ordinal_; }
  bool external() const override { return external_; }
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(s_); }
  cudaStream_t get() const { return s_; }

 private:
  int ordinal_;
  cudaStream_t s_;
  bool external_;
};

class CudaEvent final : public DeviceEvent {
 public:
  ~CudaEvent() override { reset(); }
  void reset() {
    if (e_) {
      DeviceGuard g;
      g.set(ordinal_);
      cudaEventDestroy(e_);
    }
    e_ = nullptr;
    ordinal_ = -1;
  }
  cudaEvent_t e_ = nullptr;
  int ordinal_ = -1;
};

inline cudaStream_t raw(DeviceStream* s) { return static_cast<CudaStream*>(s)->get(); }

// Words of mapped pinned host memory for signals, in slabs that live as long as the process:
// cudaHostAlloc and cudaFreeHost synchronize the device, and a signal is made and dropped per
// operation while other streams may wait on other signals (base/signal_safe_memory.h).
class SignalWords {
 public:
  struct Word {
    volatile uint32_t* host = nullptr;
    CUdeviceptr dev = 0;
  };
  Result<Word> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      constexpr size_t kWords = 1024;  // one 4 KiB slab
      void* p = nullptr;
      if (cudaError_t r = cudaHostAlloc(&p, kWords * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable))
        return cuda_error("cudaHostAlloc (signals)", r);
      void* dev = nullptr;
      if (cudaError_t r = cudaHostGetDevicePointer(&dev, p, 0)) {
        cudaFreeHost(p);
        return cuda_error("cudaHostGetDevicePointer (signals)", r);
      }
      for (size_t i = 0; i < kWords; ++i)
        free_.push_back({static_cast<volatile uint32_t*>(p) + i, reinterpret_cast<CUdeviceptr>(dev) + i * sizeof(uint32_t)});
    }
    Word w = free_.back();
    free_.pop_back();
    *w.host = 0;
    return w;
  }
  void give_back(Word w) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(w);
  }

 private:
  std::mutex mu_;
  std::vector<Word> free_;
};

inline SignalWords& signal_words() {
  static auto* w = new SignalWords();  // process lifetime: signals may be dropped at exit
  return *w;
}

// raise() stores 1 in its word; a stream waits with cuStreamWaitValue32(word >= 1) (the GPU
// polls host memory; no host thread blocks). The backend keeps it until the wait passed.
class CudaSignal final : public DeviceSignal {
 public:
  explicit CudaSignal(SignalWords::Word w) : w_(w) {}
  ~CudaSignal() override { signal_words().give_back(w_); }
  void raise() override { __atomic_store_n(w_.host, 1u, __ATOMIC_RELEASE); }
  CUdeviceptr device_address() const { return w_.dev; }

 private:
  SignalWords::Word w_;
};

}  // namespace cuda
}  // namespace uccl
