// cgroup_cpu_limit (core/idle_wait.h): the CPU quota that makes UCCL_SPIN_US=auto stop spinning,
// read from fake /proc/self/cgroup texts and cgroup trees (v1 and v2); who counts as sharing the
// CPUs for UCCL_WAIT_YIELD=auto (ranks, and the host threads of device streams).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/device.h"
#include "core/idle_wait.h"
#include "topology/peer_info.h"
#include "topology/topology.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

struct TempTree {
  fs::path root = fs::temp_directory_path() / ("uccl-cgroup-test-" + std::to_string(getpid()));
  TempTree() { fs::create_directories(root); }
  ~TempTree() { fs::remove_all(root); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
};

}  // namespace

TEST_CASE("cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us of the cpu controller's group") {
  TempTree t;
  t.write("cpu,cpuacct/job/rank0/cpu.cfs_quota_us", "10000\n");
  t.write("cpu,cpuacct/job/rank0/cpu.cfs_period_us", "100000\n");
  const std::string proc = "12:memory:/job\n4:cpu,cpuacct:/job/rank0\n0::/\n";
  CHECK(uccl::cgroup_cpu_limit(proc, t.root.string()) == doctest::Approx(0.1));
  t.write("cpu,cpuacct/job/rank0/cpu.cfs_quota_us", "-1\n");  // no quota
  CHECK(uccl::cgroup_cpu_limit(proc, t.root.string()) == 0);
}

TEST_CASE("cgroup v1 mounted as cpu/ only, and v2's cpu.max") {
  TempTree t;
  t.write("cpu/g/cpu.cfs_quota_us", "250000\n");
  t.write("cpu/g/cpu.cfs_period_us", "100000\n");
  CHECK(uccl::cgroup_cpu_limit("3:cpu:/g\n", t.root.string()) == doctest::Approx(2.5));
  t.write("job/cpu.max", "50000 100000\n");
  CHECK(uccl::cgroup_cpu_limit("0::/job\n", t.root.string()) == doctest::Approx(0.5));
  t.write("job/cpu.max", "max 100000\n");
  CHECK(uccl::cgroup_cpu_limit("0::/job\n", t.root.string()) == 0);
}

TEST_CASE("no cpu controller, a missing tree or a garbled file: no limit") {
  TempTree t;
  CHECK(uccl::cgroup_cpu_limit("", t.root.string()) == 0);
  CHECK(uccl::cgroup_cpu_limit("5:memory:/x\n", t.root.string()) == 0);
  CHECK(uccl::cgroup_cpu_limit("4:cpu,cpuacct:/nowhere\n", t.root.string()) == 0);
  t.write("cpu/g/cpu.cfs_quota_us", "lots\n");
  t.write("cpu/g/cpu.cfs_period_us", "100000\n");
  CHECK(uccl::cgroup_cpu_limit("3:cpu:/g\n", t.root.string()) == 0);
  CHECK(uccl::cgroup_cpu_limit("garbage without colons\n", t.root.string()) == 0);
  t.write("v2/cpu.max", "half 100000\n");
  CHECK(uccl::cgroup_cpu_limit("0::/v2\n", t.root.string()) == 0);
}

TEST_CASE("cpu_sharers: the ranks of this host or of this kernel, whichever are more") {
  // 2 hosts x 2 ranks; the hosts are network namespaces of one kernel (the emulated testbed).
  std::vector<uccl::PeerInfo> peers(4);
  for (int r = 0; r < 4; ++r) {
    peers[r].rank = r;
    peers[r].host_id = "h" + std::to_string(r / 2);
    peers[r].machine = "boot-A";
  }
  CHECK(uccl::cpu_sharers(*uccl::Topology::build(peers), 0) == 4);
  // Two kernels: each rank shares its CPUs with its host's two ranks only.
  peers[2].machine = peers[3].machine = "boot-B";
  CHECK(uccl::cpu_sharers(*uccl::Topology::build(peers), 0) == 2);
  CHECK(uccl::cpu_sharers(*uccl::Topology::build(peers), 3) == 2);
  // Peers that do not say their kernel: the host decides.
  for (auto& p : peers) p.machine.clear();
  CHECK(uccl::cpu_sharers(*uccl::Topology::build(peers), 1) == 2);
}

TEST_CASE("PeerInfo carries the machine through serialize/parse") {
  uccl::PeerInfo p;
  p.rank = 3;
  p.host_id = "h";
  p.machine = "0f3c-boot";
  auto q = uccl::PeerInfo::parse(p.serialize());
  REQUIRE(q.ok());
  CHECK(q.value().machine == "0f3c-boot");
  CHECK(!uccl::machine_identity().empty());
}

TEST_CASE("UCCL_WAIT_YIELD=auto counts the simulated device's stream workers beside the ranks") {
  const char* y = std::getenv("UCCL_WAIT_YIELD");
  if (y && *y && std::string(y) != "auto") {
    MESSAGE("UCCL_WAIT_YIELD=" << y << " is set: the automatic choice is not in use");
    return;
  }
  // No communicator in this process noted its ranks: it counts as one rank.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  uccl::DeviceBackend* sim = uccl::find_device_backend("sim");
  REQUIRE(sim != nullptr);
  const int before = uccl::device_host_threads();
  CHECK(uccl::idle_policy().yield == (1 + before > cpus));
  std::vector<std::unique_ptr<uccl::DeviceStream>> streams;
  for (long i = 0; i < cpus; ++i) {
    auto s = sim->create_stream(0);
    REQUIRE(s.ok());
    streams.push_back(s.take());
  }
  CHECK(uccl::device_host_threads() == before + cpus);
  CHECK(uccl::idle_policy().yield);  // 1 rank + cpus workers > cpus
  streams.clear();
  CHECK(uccl::device_host_threads() == before);
  CHECK(uccl::idle_policy().yield == (1 + before > cpus));
}
