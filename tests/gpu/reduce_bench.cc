// The CUDA reduce kernel against the device's memory bandwidth, and pinned PCIe copies.
// Built and run by tests/gpu/run.sh; prints a markdown table.
//
// Memory bandwidth reference: a device-to-device cudaMemcpy of the same size in the same run
// (reads + writes counted), which is what the copy engines reach on this HBM; the kernel moves
// 3 x size per call (two reads, one write). Host timing around 20 back-to-back calls between
// two synchronize()s (launch overhead is negligible at 256 MiB).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/device.h"

using namespace uccl;

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
template <class F>
double time_it(DeviceBackend* b, DeviceStream* s, int iters, F f) {
  f();  // warm up
  b->synchronize(s);
  const double t0 = now();
  for (int i = 0; i < iters; ++i) f();
  b->synchronize(s);
  return (now() - t0) / iters;
}
}  // namespace

int main() {
  DeviceBackend* b = find_device_backend("cuda");
  std::string why;
  if (!b || !b->available(&why)) {
    std::printf("reduce_bench: CUDA unavailable: %s\n", why.c_str());
    return 1;
  }
  auto st = b->create_stream(0);
  DeviceStream* s = st.value().get();
  const size_t bytes = size_t{256} << 20;
  void* x = b->alloc(0, bytes).value();
  void* y = b->alloc(0, bytes).value();
  void* z = b->alloc(0, bytes).value();
  const int iters = 20;
  std::printf("## CUDA reduce kernel vs device memory bandwidth (256 MiB buffers)\n\n");
  std::printf("| what | time (us) | GB/s (bytes moved) | vs D2D copy |\n|---|---|---|---|\n");
  const double tc = time_it(b, s, iters, [&] { b->copy_async(z, x, bytes, CopyDir::kDeviceToDevice, s); });
  const double copy_bw = 2.0 * bytes / tc / 1e9;
  std::printf("| D2D cudaMemcpyAsync | %.1f | %.1f | 100%% |\n", tc * 1e6, copy_bw);
  struct Case { const char* name; DataType dt; RedOp op; size_t es; };
  for (const Case& c : {Case{"reduce float32 sum", DataType::kFloat32, RedOp::kSum, 4},
                        Case{"reduce bfloat16 sum", DataType::kBFloat16, RedOp::kSum, 2},
                        Case{"reduce float16 sum", DataType::kFloat16, RedOp::kSum, 2},
                        Case{"reduce float32 max", DataType::kFloat32, RedOp::kMax, 4},
                        Case{"reduce int8 sum", DataType::kInt8, RedOp::kSum, 1}}) {
    const double t = time_it(b, s, iters, [&] { b->reduce_async(z, x, y, bytes / c.es, c.dt, c.op, s); });
    const double bw = 3.0 * bytes / t / 1e9;
    std::printf("| %s | %.1f | %.1f | %.0f%% |\n", c.name, t * 1e6, bw, 100.0 * bw / copy_bw);
  }
  void* h = b->alloc_pinned(bytes).value();
  std::memset(h, 1, bytes);
  const double th = time_it(b, s, 10, [&] { b->copy_async(x, h, bytes, CopyDir::kHostToDevice, s); });
  const double td = time_it(b, s, 10, [&] { b->copy_async(h, x, bytes, CopyDir::kDeviceToHost, s); });
  std::printf("\n## Pinned PCIe copies (256 MiB)\n\n| direction | GB/s |\n|---|---|\n");
  std::printf("| host->device | %.1f |\n| device->host | %.1f |\n", bytes / th / 1e9, bytes / td / 1e9);
  b->free_pinned(h);
  b->free(x);
  b->free(y);
  b->free(z);
  return 0;
}
