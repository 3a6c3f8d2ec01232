// The device-backend registry (see device.h).
#include "base/device.h"

#include "base/config.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <mutex>

namespace uccl {
namespace {
std::mutex& reg_mu() {
  static std::mutex mu;
  return mu;
}
// Append-only and read without a lock: the issue path asks any_device_memory() per operation.
constexpr int kMaxBackends = 16;
DeviceBackend* g_reg[kMaxBackends];
std::atomic<int> g_count{0};
}  // namespace

Result<std::shared_ptr<DeviceSignal>> DeviceBackend::create_signal(int) {
  return NotSupported(std::string(name()) + ": streams cannot wait for a host signal");
}

Status DeviceBackend::stream_wait_signal(DeviceStream*, const std::shared_ptr<DeviceSignal>&, StreamWaitMode) {
  return NotSupported(std::string(name()) + ": streams cannot wait for a host signal");
}

const char* stream_wait_mode_name(StreamWaitMode m) {
  switch (m) {
    case StreamWaitMode::kHost: return "host";
    case StreamWaitMode::kSignal: return "signal";
    case StreamWaitMode::kKernel: return "kernel";
  }
  return "unknown";
}

const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::kHost: return "host";
    case MemoryKind::kCuda: return "cuda";
    case MemoryKind::kSim: return "sim";
    case MemoryKind::kOther: return "other";
  }
  return "unknown";
}

bool register_device_backend(DeviceBackend* backend) {
  std::lock_guard<std::mutex> lock(reg_mu());
  const int n = g_count.load();
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(g_reg[i]->name(), backend->name()) == 0) {
      std::fprintf(stderr, "uccl: device backend '%s' registered twice\n", backend->name());
      std::abort();
    }
  }
  if (n == kMaxBackends) {
    std::fprintf(stderr, "uccl: more than %d device backends\n", kMaxBackends);
    std::abort();
  }
  g_reg[n] = backend;
  g_count.store(n + 1, std::memory_order_release);
  return true;
}

std::vector<DeviceBackend*> device_backends() {
  const int n = g_count.load(std::memory_order_acquire);
  return std::vector<DeviceBackend*>(g_reg, g_reg + n);
}

DeviceBackend* find_device_backend(const std::string& name) {
  for (DeviceBackend* b : device_backends())
    if (name == b->name()) return b;
  return nullptr;
}

MemoryLoc locate_memory(const void* ptr) {
  MemoryLoc loc;
  if (ptr == nullptr) return loc;
  for (DeviceBackend* b : device_backends()) {
    std::string why;
    int ordinal = -1;
    if (b->available(&why) && b->owns(ptr, &ordinal)) {
      loc.kind = b->kind();
      loc.backend = b;
      loc.ordinal = ordinal;
      return loc;
    }
  }
  return loc;
}

MemoryInfo memory_info(const void* ptr) {
  const MemoryLoc loc = locate_memory(ptr);
  MemoryInfo info;
  if (loc.is_device()) {
    info.device = true;
    info.backend = loc.backend->name();
    info.ordinal = loc.ordinal;
  }
  return info;
}

bool any_device_memory() {
  const int n = g_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    DeviceBackend* b = g_reg[i];
    std::string why;
    if (b->may_own_memory() && b->available(&why)) return true;
  }
  return false;
}

namespace {
std::atomic<int> g_device_host_threads{0};
}  // namespace

int device_host_threads() { return g_device_host_threads.load(std::memory_order_relaxed); }

void add_device_host_threads(int delta) { g_device_host_threads.fetch_add(delta, std::memory_order_relaxed); }

const TextSetting kStreamWait("device", "UCCL_STREAM_WAIT", "auto",
                              "how wait(stream=) / the torch backend's work.wait() hold a stream back: signal (the "
                              "device runtime waits on a flag uccl raises; the host returns at once), kernel (a "
                              "one-thread kernel on the stream polls that flag), host (the host waits for the op), "
                              "auto (signal where the device runtime cannot deadlock on it: the simulated device, "
                              "and there on the process's first communicator only, host on the others; host on "
                              "CUDA; device.h)",
                              one_of({"auto", "signal", "kernel", "host"}));

StreamWaitMode stream_wait_policy(DeviceBackend* b, std::string* why) {
  const std::string& mode = kStreamWait.get();
  if (mode == "signal") return StreamWaitMode::kSignal;
  if (mode == "kernel") return StreamWaitMode::kKernel;
  if (mode == "host") {
    if (why) *why = "UCCL_STREAM_WAIT=host";
    return StreamWaitMode::kHost;
  }
  return b->signal_waits_safe(why) ? StreamWaitMode::kSignal : StreamWaitMode::kHost;
}

StreamWaitMode stream_wait_for(DeviceBackend* b, bool owns_signal_waits, std::string* why) {
  const StreamWaitMode m = stream_wait_policy(b, why);
  if (m == StreamWaitMode::kHost || owns_signal_waits || kStreamWait.get() != "auto") return m;
  if (why) *why = "auto: another communicator of this process waits by signal";
  return StreamWaitMode::kHost;
}

const TextSetting kDeviceCopies("device", "UCCL_DEVICE_COPIES", "auto",
                                "how uccl's own copies of device memory run: engine (the copy engines, DMA), kernel "
                                "(the device's cores, as NCCL moves data: a copy a user queued behind a wait on uccl "
                                "holds the shared engine queues, not a running kernel; base/device.h), auto (kernel "
                                "where user streams may wait on uccl's signals, UCCL_STREAM_WAIT; else engine)",
                                one_of({"auto", "engine", "kernel"}));

bool copies_by_kernel(DeviceBackend* b) {
  const std::string& mode = kDeviceCopies.get();
  if (mode == "engine") return false;
  if (mode == "kernel") return true;
  return stream_wait_policy(b, nullptr) != StreamWaitMode::kHost;
}

Status device_copy_async(DeviceBackend* b, void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
  return copies_by_kernel(b) ? b->copy_by_kernel_async(dst, src, bytes, dir, s) : b->copy_async(dst, src, bytes, dir, s);
}

std::vector<DeviceBackendInfo> device_backend_infos() {
  std::vector<DeviceBackendInfo> out;
  for (DeviceBackend* b : device_backends()) {
    DeviceBackendInfo i;
    i.name = b->name();
    i.kind = b->kind();
    i.available = b->available(&i.why_not);
    i.devices = i.available ? b->device_count() : 0;
    if (i.available) {
      std::string why;
      const StreamWaitMode m = stream_wait_policy(b, &why);
      i.stream_wait = m == StreamWaitMode::kHost ? "host (" + why + ")" : stream_wait_mode_name(m);
      i.staging_chunk = b->staging_chunk_bytes();
      i.copies = copies_by_kernel(b) ? "kernel" : "engine";
    }
    out.push_back(i);
  }
  return out;
}

Status refuse_capture(DeviceBackend* b, DeviceStream* s, const std::string& what) {
  Result<bool> c = b->capturing(s);
  if (!c.ok()) return c.status().with_context(what);
  if (!c.value()) return Status::Ok();
  return Status(Code::kNotSupported,
                what + ": the stream is capturing a " + b->name() +
                    " graph; uccl's operations run on its own thread and cannot be recorded into one: issue "
                    "the collective outside the capture (capture only the computation around it)");
}

}  // namespace uccl
