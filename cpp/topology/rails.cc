#include "topology/rails.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "base/device.h"
#include "base/log.h"
#include "topology/local_host.h"

namespace uccl {

const TextSetting kRailNics("network", "UCCL_RAIL_NICS", "auto",
                            "auto: with several NICs of similar speed on separate subnets, each rank of a host listens "
                            "on its rail's NIC (closest to its accelerator in the PCIe tree, else local rank i takes "
                            "NIC i); a rail NIC that is missing or has no link: every NIC with one (strict: an "
                            "error); off: every rank on every NIC",
                            one_of({"auto", "off", "strict"}));

namespace {

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return !p.empty() && realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

// Path components two resolved sysfs paths share (/sys/devices/pci0000:00/0000:00:02.0/...).
size_t common_depth(const std::string& a, const std::string& b) {
  size_t depth = 0, i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) {
    if (a[i] == '/') ++depth;
    ++i;
  }
  const bool whole = (i == a.size() || a[i] == '/') && (i == b.size() || b[i] == '/');
  return whole ? depth + 1 : depth;
}

int numa_node(const std::string& device_dir) {
  std::ifstream f(device_dir + "/numa_node");
  int n = -1;
  return f >> n ? n : -1;
}

}  // namespace

RailPick pick_rail(const std::vector<RailCandidate>& in, int local_rank, int local_size, const std::string& accel_pci,
                   const std::string& sysfs_root) {
  RailPick pick;
  if (kRailNics.get() == "off") return pick;
  // One candidate per subnet, the much slower ones left out, sorted by subnet (then name) so
  // that every rank of the host numbers the rails alike.
  double fastest = 0;
  for (auto& c : in) fastest = std::max(fastest, c.gbps);
  std::vector<int> rails;
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    const RailCandidate& c = in[i];
    if (c.gbps > 0 && c.gbps < 0.5 * fastest) continue;
    bool dup = false;
    for (int j : rails) dup |= !c.network.empty() && in[j].network == c.network;
    if (!dup) rails.push_back(i);
  }
  if (rails.size() < 2) return pick;
  std::sort(rails.begin(), rails.end(), [&](int a, int b) {
    return in[a].network != in[b].network ? in[a].network < in[b].network : in[a].name < in[b].name;
  });
  if (!accel_pci.empty()) {
    const std::string accel = real(sysfs_root + "/bus/pci/devices/" + accel_pci);
    if (!accel.empty()) {
      size_t best = 0;
      std::vector<int> at_best;
      for (int i : rails) {
        const std::string nic = real(in[i].sysfs_device);
        const size_t d = nic.empty() ? 0 : common_depth(accel, nic);
        if (d > best) at_best.clear(), best = d;
        if (d == best && d > 0) at_best.push_back(i);
      }
      if (at_best.size() > 1) {  // the same PCIe distance: prefer the accelerator's NUMA node
        const int node = numa_node(accel);
        std::vector<int> near;
        for (int i : at_best)
          if (node >= 0 && numa_node(real(in[i].sysfs_device)) == node) near.push_back(i);
        if (near.size() == 1) at_best = near;
      }
      if (at_best.size() == 1) {
        pick.index = at_best[0];
        pick.why = "closest to accelerator " + accel_pci + " in the PCIe tree";
        return pick;
      }
    }
  }
  if (local_rank >= 0 && local_size >= 2) {
    const size_t r = static_cast<size_t>(local_rank) % rails.size();
    pick.index = rails[r];
    pick.why = "rail " + std::to_string(r) + " of " + std::to_string(rails.size()) + " NICs for local rank " +
               std::to_string(local_rank) + " of " + std::to_string(local_size);
  }
  return pick;
}

std::string accelerator_pci() {
  for (DeviceBackend* b : device_backends()) {
    std::string id = b->current_pci_bus_id();
    if (!id.empty()) return id;
  }
  return "";
}

Result<std::vector<NetInterface>> rail_interfaces(const std::vector<NetInterface>& ifs, std::string* why) {
  if (kRailNics.get() == "off") return ifs;
  const int local_rank = launcher_local_rank();
  if (local_rank >= 0 && !kTopoFile.get().empty()) {
    PeerInfo me;  // what the file may match this host by: its name, id and addresses
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    me.hostname = host;
    for (auto& nif : ifs) me.nics.push_back({nif.name, "tcp", "", nif.addr.to_string(), 0, ""});
    auto rails = declared_rails(host_identity(), me);
    if (!rails.ok()) return rails.status();
    if (!rails.value().empty()) {
      const size_t i = static_cast<size_t>(local_rank) % rails.value().size();
      const std::string& name = rails.value()[i];
      std::vector<NetInterface> out;
      bool present = false;
      for (auto& nif : ifs)
        if (nif.name == name) {
          present = true;
          if (nif.running) out.push_back(nif);
        }
      if (out.empty())
        return rail_fallback(ifs,
                             "UCCL_TOPO_FILE=" + kTopoFile.get() + ": rail " + name + " of local rank " +
                                 std::to_string(local_rank) +
                                 (present ? " has no link" : " is not among the interfaces UCCL_SOCKET_IFNAME selects"),
                             why);
      *why = "topology file rail " + std::to_string(i) + " of " + std::to_string(rails.value().size()) +
             " for local rank " + std::to_string(local_rank);
      return out;
    }
  }
  std::vector<RailCandidate> cands;  // one per interface (it may have a v4 and a v6 address)
  for (auto& nif : ifs) {
    bool seen = nif.loopback || !nif.running;  // a NIC without a link is no rail
    for (auto& c : cands) seen |= c.name == nif.name;
    if (!seen) cands.push_back({nif.name, nif.network, nif.speed_gbps, "/sys/class/net/" + nif.name + "/device"});
  }
  const RailPick pick = pick_rail(cands, local_rank, launcher_local_size(), accelerator_pci());
  if (pick.index < 0) {
    std::vector<NetInterface> live = with_link(ifs);
    return live.empty() ? ifs : live;
  }
  std::vector<NetInterface> out;
  for (auto& nif : ifs)
    if (nif.name == cands[pick.index].name) out.push_back(nif);
  *why = pick.why;
  return out;
}

std::vector<NetInterface> with_link(const std::vector<NetInterface>& ifs) {
  std::vector<NetInterface> out;
  for (auto& nif : ifs)
    if (nif.loopback || nif.running) out.push_back(nif);
  return out;
}

Result<std::vector<NetInterface>> rail_fallback(const std::vector<NetInterface>& all, const std::string& what,
                                                std::string* why) {
  if (kRailNics.get() == "strict") return InvalidArgument(what + " (UCCL_RAIL_NICS=strict)");
  std::vector<NetInterface> out = with_link(all);
  if (out.empty()) return InvalidArgument(what + ", and no other interface has a link");
  std::vector<std::string> names;  // an interface may have a v4 and a v6 address
  for (auto& nif : out)
    if (!nif.loopback && std::find(names.begin(), names.end(), nif.name) == names.end()) names.push_back(nif.name);
  std::string list;
  for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
  *why = what + ": every NIC with a link instead (" + list + "), striping over them";
  UCCL_WARN("%s", why->c_str());
  return out;
}

}  // namespace uccl
