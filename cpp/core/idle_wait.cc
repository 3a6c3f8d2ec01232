#include "core/idle_wait.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <sstream>
#include <string>
#include <cerrno>
#include <vector>

#include "base/config.h"
#include "base/device.h"

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449  // Linux 5.16, the same number on every architecture
#endif

namespace uccl {
namespace {

timespec to_timespec(double s) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>((s - static_cast<double>(ts.tv_sec)) * 1e9);
  return ts;
}

// struct futex_waitv of <linux/futex.h> (5.16+), spelled out for older headers.
struct WaitV {
  uint64_t val;
  uint64_t uaddr;
  uint32_t flags;
  uint32_t reserved;
};
constexpr uint32_t kFutex2Size32 = 0x02;  // FUTEX2_SIZE_U32; shared: no FUTEX2_PRIVATE

bool waitv_missing = false;  // ENOSYS once: an old kernel, fall back for good

void sleep_on_futexes(const std::vector<FutexWord>& fw, double timeout_s) {
  if (fw.size() == 1 || waitv_missing) {
    // The first word only (old kernel with several): a short timeout covers the others.
    const double t = fw.size() == 1 ? timeout_s : std::min(timeout_s, 100e-6);
    timespec ts = to_timespec(t);
    syscall(SYS_futex, fw[0].addr, FUTEX_WAIT, fw[0].value, &ts, nullptr, 0);
    return;
  }
  WaitV v[64];
  const size_t n = std::min<size_t>(fw.size(), 64);
  for (size_t i = 0; i < n; ++i) v[i] = {fw[i].value, reinterpret_cast<uint64_t>(fw[i].addr), kFutex2Size32, 0};
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  timespec until = to_timespec(static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9 + timeout_s);
  if (syscall(SYS_futex_waitv, v, n, 0, &until, CLOCK_MONOTONIC) < 0 && errno == ENOSYS) waitv_missing = true;
}

}  // namespace

void idle_sleep(const WaitSet& ws, double timeout_s) {
  if (!ws.futexes.empty() && ws.fds.empty() && !ws.poll_only) return sleep_on_futexes(ws.futexes, timeout_s);
  // A futex or an endpoint that can only be polled is looked at again after 100 us.
  if (!ws.futexes.empty() || ws.poll_only) timeout_s = std::min(timeout_s, 100e-6);
  timespec ts = to_timespec(timeout_s);
  if (ws.fds.empty()) {
    nanosleep(&ts, nullptr);
    return;
  }
  pollfd pfds[64];
  const size_t n = std::min<size_t>(ws.fds.size(), 64);
  for (size_t i = 0; i < n; ++i) pfds[i] = {ws.fds[i], POLLIN, 0};
  ppoll(pfds, n, &ts, nullptr);
}

namespace {
std::atomic<int> cpu_sharers_noted{0};
}  // namespace

int cpu_sharers(const Topology& topo, int rank) {
  const std::string& mine = topo.peer(rank).machine;
  int same_kernel = 0;
  if (!mine.empty())
    for (const PeerInfo& p : topo.peers()) same_kernel += p.machine == mine;
  return std::max(same_kernel, static_cast<int>(topo.host_members(topo.host_of(rank)).size()));
}

void note_cpu_sharers(int n) {
  int cur = cpu_sharers_noted.load(std::memory_order_relaxed);
  while (n > cur && !cpu_sharers_noted.compare_exchange_weak(cur, n)) {
  }
}

namespace {
constexpr double kDefaultSpinUs = 5000;
const DoubleSetting kSpinUs("general", "UCCL_SPIN_US", "auto",
                            "microseconds a waiting rank spins (progress passes) before it sleeps until a peer's "
                            "write wakes it; auto: 5000, or 0 when the process's cgroup has a CPU quota below one "
                            "core (spinning would spend the quota its compute needs)",
                            [](const std::string& text, double* out) -> std::string {
                              if (text == "auto" || text.empty()) {
                                *out = -1;  // decided in idle_policy()
                                return "";
                              }
                              return number_at_least(0)(text, out);
                            });

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const TextSetting kWaitYield("general", "UCCL_WAIT_YIELD", "auto",
                             "sched_yield between the spin's passes: auto does when more ranks share the machine (its "
                             "kernel) than it has CPUs (like Open MPI when oversubscribed), counting beside each rank "
                             "the host threads of its device streams (the simulated device's), 1 always, 0 never",
                             one_of({"auto", "", "0", "1"}));
}  // namespace

double cgroup_cpu_limit(const std::string& proc_cgroup, const std::string& root) {
  std::istringstream lines(proc_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; v2 is "0::path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (ctrl.empty()) {  // v2: cpu.max = "quota period" or "max period"
      std::istringstream m(read_text(root + path + "/cpu.max"));
      std::string quota;
      double period = 0;
      double q = 0;
      if (m >> quota >> period && quota != "max" && period > 0 && std::istringstream(quota) >> q) return q / period;
      continue;
    }
    std::istringstream cs(ctrl);
    std::string c;
    bool cpu = false;
    while (std::getline(cs, c, ',')) cpu |= c == "cpu";
    if (!cpu) continue;
    for (const std::string& dir : {root + "/" + ctrl + path, root + "/cpu" + path}) {
      std::istringstream q(read_text(dir + "/cpu.cfs_quota_us")), p(read_text(dir + "/cpu.cfs_period_us"));
      double quota = 0, period = 0;
      if (q >> quota && p >> period) return quota > 0 && period > 0 ? quota / period : 0;
    }
  }
  return 0;
}

IdlePolicy idle_policy() {
  // Settings are read once (base/config.h), so their part of the policy is worked out once:
  // every blocking call asks (the string compare alone was visible in an 8-byte loop).
  struct Fixed {
    double spin_s;
    int yield;  // 0 no, 1 yes, 2 auto
  };
  static const Fixed fixed = [] {
    Fixed f;
    const double spin_us = kSpinUs.get();
    if (spin_us >= 0) {
      f.spin_s = spin_us * 1e-6;
    } else {
      // A launcher puts a rank into its cgroup before exec (uccl/parallel/cpuquota.py).
      const double limit = cgroup_cpu_limit(read_text("/proc/self/cgroup"), "/sys/fs/cgroup");
      f.spin_s = limit > 0 && limit < 1 ? 0 : kDefaultSpinUs * 1e-6;
    }
    const std::string& y = kWaitYield.get();
    f.yield = y == "auto" || y.empty() ? 2 : y == "1" ? 1 : 0;
    return f;
  }();
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  IdlePolicy p;
  p.spin_s = fixed.spin_s;
  if (fixed.yield == 2) {
    // Every rank sharing the CPUs, and beside each the host threads that run its device streams
    // (as many as this process runs: the ranks of one machine run one program).
    const long ranks = std::max(1, cpu_sharers_noted.load(std::memory_order_relaxed));
    p.yield = ranks * (1 + device_host_threads()) > cpus;
  } else {
    p.yield = fixed.yield == 1;
  }
  return p;
}

}  // namespace uccl
