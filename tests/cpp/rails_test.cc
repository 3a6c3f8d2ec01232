// The rail NIC choice (topology/rails.h) over a fake sysfs tree: PCIe closeness to the
// accelerator, the NUMA tie-break, the local-rank fallback, one subnet per rail, slow NICs left out.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "test_util.h"
#include "topology/rails.h"

using namespace uccl;

namespace {

struct FakeSysfs {
  std::string root;
  FakeSysfs() {
    char tmpl[] = "/tmp/uccl-rails-XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~FakeSysfs() { std::system(("rm -rf " + root).c_str()); }
  void mkdirs(const std::string& rel) { std::system(("mkdir -p " + root + "/" + rel).c_str()); }
  // A PCI device at devices/<path>, with its numa_node, reachable as `link` (relative to root).
  void device(const std::string& path, const std::string& link, int numa) {
    mkdirs("devices/" + path);
    std::ofstream(root + "/devices/" + path + "/numa_node") << numa << "\n";
    const std::string dir = link.substr(0, link.rfind('/'));
    mkdirs(dir);
    REQUIRE(symlink((root + "/devices/" + path).c_str(), (root + "/" + link).c_str()) == 0);
  }
};

RailCandidate nic(const FakeSysfs& fs, const std::string& name, const std::string& net, double gbps = 100) {
  return {name, net, gbps, fs.root + "/class/net/" + name + "/device"};
}

}  // namespace

TEST_CASE("rail NIC: the accelerator's PCIe neighbour, then its NUMA node, then the local rank") {
  FakeSysfs fs;
  // Two PCIe switches under one root complex: GPU0 + eth0 behind switch A, GPU1 + eth1 behind B.
  fs.device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", "bus/pci/devices/0000:02:00.0", 0);  // GPU0
  fs.device("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", "class/net/eth0/device", 0);
  fs.device("pci0000:00/0000:00:03.0/0000:05:00.0/0000:06:00.0", "bus/pci/devices/0000:06:00.0", 1);  // GPU1
  fs.device("pci0000:00/0000:00:03.0/0000:05:00.0/0000:06:01.0", "class/net/eth1/device", 1);
  // A GPU on its own root port: both NICs equally far; NUMA node 1 decides.
  fs.device("pci0000:00/0000:00:07.0/0000:09:00.0", "bus/pci/devices/0000:09:00.0", 1);
  const std::vector<RailCandidate> c = {nic(fs, "eth0", "10.210.1.0/24"), nic(fs, "eth1", "10.211.1.0/24")};

  RailPick p = pick_rail(c, 0, 2, "0000:06:00.0", fs.root);  // local rank 0, but GPU1's neighbour wins
  CHECK(p.index == 1);
  CHECK(p.why == "closest to accelerator 0000:06:00.0 in the PCIe tree");
  CHECK(pick_rail(c, 1, 2, "0000:02:00.0", fs.root).index == 0);
  p = pick_rail(c, 0, 2, "0000:09:00.0", fs.root);
  CHECK(p.index == 1);  // same distance: same NUMA node
  // No accelerator (or one sysfs does not show): local rank i takes rail i, wrapping around.
  p = pick_rail(c, 1, 4, "", fs.root);
  CHECK((p.index == 1 && p.why == "rail 1 of 2 NICs for local rank 1 of 4"));
  CHECK(pick_rail(c, 2, 4, "0000:ff:00.0", fs.root).index == 0);
  // One rank on the host, or the local rank unknown: every NIC (a connection stripes over them).
  CHECK(pick_rail(c, 0, 1, "", fs.root).index == -1);
  CHECK(pick_rail(c, -1, -1, "", fs.root).index == -1);
  // Rails are subnets (two NICs on one subnet are one rail), sorted by subnet on every rank.
  const std::vector<RailCandidate> same = {nic(fs, "eth0", "10.210.1.0/24"), nic(fs, "eth1", "10.210.1.0/24")};
  CHECK(pick_rail(same, 1, 2, "", fs.root).index == -1);
  const std::vector<RailCandidate> rev = {nic(fs, "eth9", "10.211.1.0/24"), nic(fs, "eth8", "10.210.1.0/24")};
  CHECK(pick_rail(rev, 0, 2, "", fs.root).index == 1);
  // A slow management network is not a rail.
  const std::vector<RailCandidate> mgmt = {nic(fs, "eth0", "10.210.1.0/24", 100), nic(fs, "eno1", "192.168.0.0/24", 1)};
  CHECK(pick_rail(mgmt, 1, 2, "", fs.root).index == -1);
}

TEST_CASE("launcher_local_size reads the launchers' variables") {
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALNRANKS");
  setenv("SLURM_NTASKS_PER_NODE", "4(x2)", 1);
  CHECK(launcher_local_size() == 4);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  CHECK(launcher_local_size() == 8);
  unsetenv("LOCAL_WORLD_SIZE");
  unsetenv("SLURM_NTASKS_PER_NODE");
  CHECK(launcher_local_size() == -1);
}

TEST_CASE("interfaces carry their subnet") {
  for (auto& ni : list_interfaces())
    if (ni.loopback && ni.addr.family() == AF_INET) CHECK(ni.network == "127.0.0.0/8");
}

TEST_CASE("a rail NIC without a link: the NICs with one instead, and why") {
  auto nic = [](const char* name, const char* addr, bool running) {
    NetInterface n;
    n.name = name;
    auto a = parse_address(addr, 0);
    REQUIRE(a.ok());
    n.addr = a.value();
    n.up = true;
    n.running = running;
    return n;
  };
  const std::vector<NetInterface> ifs = {nic("eth0", "10.210.1.1", true), nic("eth1", "10.211.1.1", false),
                                         nic("eth2", "10.212.1.1", true)};
  CHECK(with_link(ifs).size() == 2);
  std::string why;
  auto got = rail_fallback(ifs, "rail eth1 of local rank 1 has no link", &why);
  REQUIRE(got.ok());
  REQUIRE(got.value().size() == 2);
  CHECK(got.value()[0].name == "eth0");
  CHECK(got.value()[1].name == "eth2");
  CHECK(why == "rail eth1 of local rank 1 has no link: every NIC with a link instead (eth0, eth2), striping over them");
  auto none = rail_fallback({nic("eth1", "10.211.1.1", false)}, "rail eth1 has no link", &why);
  CHECK(none.status().code() == Code::kInvalidArgument);
}
