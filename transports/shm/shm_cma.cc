#include "transports/shm/shm_cma.h"

#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#ifndef PR_SET_PTRACER
#define PR_SET_PTRACER 0x59616d61
#endif
#ifndef PR_SET_PTRACER_ANY
#define PR_SET_PTRACER_ANY ((unsigned long)-1)
#endif

namespace uccl {
namespace shm {
namespace {

// Lives for the whole process, so a peer may probe it at any time after the offer went out.
volatile uint64_t g_probe_word = 0;
std::once_flag g_probe_once;

void init_probe_word() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(getpid()) << 32);
  }
  g_probe_word = v | 1;  // never 0, so an all-zero page never passes the probe
}

}  // namespace

void cma_allow_peers() {
  static std::once_flag once;
  // EINVAL without Yama: nothing to relax, nothing to report.
  std::call_once(once, [] { prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); });
}

uintptr_t cma_probe_address() {
  std::call_once(g_probe_once, init_probe_word);
  return reinterpret_cast<uintptr_t>(&g_probe_word);
}

uint64_t cma_probe_value() {
  std::call_once(g_probe_once, init_probe_word);
  return g_probe_word;
}

bool cma_probe(pid_t pid, uintptr_t address, uint64_t value) {
  if (pid <= 0 || address == 0) return false;
  uint64_t got = 0;
  return cma_read(pid, &got, address, sizeof got) == static_cast<ssize_t>(sizeof got) && got == value;
}

ssize_t cma_read(pid_t pid, void* local, uintptr_t remote, size_t bytes) {
  iovec l{local, bytes};
  iovec r{reinterpret_cast<void*>(remote), bytes};
  ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
  return n < 0 ? -errno : n;
}

ssize_t cma_write(pid_t pid, uintptr_t remote, const void* local, size_t bytes) {
  iovec l{const_cast<void*>(local), bytes};
  iovec r{reinterpret_cast<void*>(remote), bytes};
  ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
  return n < 0 ? -errno : n;
}

}  // namespace shm
}  // namespace uccl
