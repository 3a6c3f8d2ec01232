// The device-backend registry (see device.h).
#include "base/device.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace uccl {
namespace {
std::mutex& reg_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<DeviceBackend*>& reg() {
  static std::vector<DeviceBackend*> v;
  return v;
}
}  // namespace

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
  for (DeviceBackend* b : reg()) {
    if (std::strcmp(b->name(), backend->name()) == 0) {
      std::fprintf(stderr, "uccl: device backend '%s' registered twice\n", backend->name());
      std::abort();
    }
  }
  reg().push_back(backend);
  return true;
}

std::vector<DeviceBackend*> device_backends() {
  std::lock_guard<std::mutex> lock(reg_mu());
  return reg();
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

std::vector<DeviceBackendInfo> device_backend_infos() {
  std::vector<DeviceBackendInfo> out;
  for (DeviceBackend* b : device_backends()) {
    DeviceBackendInfo i;
    i.name = b->name();
    i.kind = b->kind();
    i.available = b->available(&i.why_not);
    i.devices = i.available ? b->device_count() : 0;
    out.push_back(i);
  }
  return out;
}

}  // namespace uccl
