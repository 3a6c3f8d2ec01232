#include "topology/local_host.h"

#include <dirent.h>

#include <fstream>
#include <mutex>

#include "base/config.h"
#include "base/log.h"
#include "topology/declared_topology.h"

namespace uccl {

const TextSetting kTopoFile("topology", "UCCL_TOPO_FILE", "",
                            "topology file (JSON or YAML): clusters, hosts, NICs, fabrics, link rates", any_text());
const TextSetting kCluster("topology", "UCCL_CLUSTER", "", "name of the cluster this rank belongs to", any_text());
namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  DIR* d = opendir(path.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') out.push_back(e->d_name);
  closedir(d);
  return out;
}

// "10.0.0.1:4000" / "[fd00::1]:4000" / "10.0.0.1" -> "10.0.0.1" / "fd00::1"
std::string ip_of(const std::string& addr) {
  if (!addr.empty() && addr[0] == '[') return addr.substr(1, addr.find(']') - 1);
  size_t colon = addr.find(':');
  if (colon != std::string::npos && addr.find(':', colon + 1) == std::string::npos) return addr.substr(0, colon);
  return addr;
}

bool host_matches(const TopoValue& h, const std::string& host_id, const PeerInfo& me) {
  std::string name = h.is_map() ? (h.get("name") ? h.get("name")->as_string() : "") : h.as_string();
  if (!name.empty() && (name == me.hostname || name == host_id)) return true;
  const TopoValue* addrs = h.get("addresses");
  if (!addrs || !addrs->is_list()) return false;
  for (auto& a : addrs->list)
    for (auto& n : me.nics)
      if (ip_of(n.address) == a.as_string()) return true;
  return false;
}

double fabric_gbps(const TopoValue& doc, const std::string& fabric) {
  const TopoValue* fabs = doc.get("fabrics");
  if (!fabs || !fabs->is_list()) return 0;
  for (auto& f : fabs->list)
    if (f.get("name") && f.get("name")->as_string() == fabric) return f.get("gbps") ? f.get("gbps")->as_number() : 0;
  return 0;
}

}  // namespace

std::vector<NicInfo> discover_rdma_nics(const std::string& root) {
  std::vector<NicInfo> out;
  for (const std::string& dev : list_dir(root)) {
    for (const std::string& port : list_dir(root + "/" + dev + "/ports")) {
      const std::string p = root + "/" + dev + "/ports/" + port;
      if (read_line(p + "/state").find("ACTIVE") == std::string::npos) continue;
      const std::string layer = read_line(p + "/link_layer");
      NicInfo n;
      n.name = dev + ":" + port;
      n.kind = layer == "InfiniBand" ? "ib" : "roce";
      n.gbps = std::atof(read_line(p + "/rate").c_str());  // "100 Gb/sec (4X EDR)"
      // An IB port's subnet prefix names its fabric; RoCE fabrics must be declared (two RoCE
      // NICs on unrelated Ethernets look alike from here).
      const std::string gid0 = read_line(p + "/gids/0");
      if (n.kind == "ib" && gid0.size() >= 19) n.fabric = "ib:" + gid0.substr(0, 19);
      n.address = gid0;
      out.push_back(n);
    }
  }
  return out;
}

Result<bool> apply_topology_doc(const TopoValue& doc, const std::string& host_id, PeerInfo* me) {
  if (!doc.is_map()) return InvalidArgument("topology file: the top level must be a mapping");
  if (auto* v = doc.get("host_gbps")) me->rates.host_gbps = v->as_number();
  if (auto* v = doc.get("inter_cluster_gbps")) me->rates.uplink_gbps = v->as_number();
  const TopoValue* clusters = doc.get("clusters");
  if (!clusters) return false;
  if (!clusters->is_list()) return InvalidArgument("topology file: 'clusters' must be a list");
  for (auto& c : clusters->list) {
    const TopoValue* hosts = c.get("hosts");
    if (!hosts || !hosts->is_list()) continue;
    for (auto& h : hosts->list) {
      if (!host_matches(h, host_id, *me)) continue;
      const std::string cname = c.get("name") ? c.get("name")->as_string() : "";
      if (me->cluster.empty()) me->cluster = cname;
      const std::string cfabric = c.get("fabric") ? c.get("fabric")->as_string() : cname;
      if (auto* v = c.get("host_gbps")) me->rates.host_gbps = v->as_number();
      if (auto* v = c.get("nic_gbps")) me->rates.nic_gbps = v->as_number();
      if (auto* v = c.get("uplink_gbps")) me->rates.uplink_gbps = v->as_number();
      // NICs: the declaration names the fabric and rate of what was discovered.
      for (auto& n : me->nics) {
        if (n.kind == "tcp" && n.fabric.empty()) n.fabric = cfabric;
        if (n.kind == "tcp" && n.gbps <= 0 && me->rates.nic_gbps > 0) n.gbps = me->rates.nic_gbps;
      }
      const TopoValue* nics = h.is_map() ? h.get("nics") : nullptr;
      if (nics && nics->is_list()) {
        for (auto& d : nics->list) {
          const std::string name = d.get("name") ? d.get("name")->as_string() : "";
          for (auto& n : me->nics) {
            if (n.name != name && n.name.rfind(name + ":", 0) != 0) continue;
            if (auto* v = d.get("fabric")) n.fabric = v->as_string();
            double g = d.get("gbps") ? d.get("gbps")->as_number() : fabric_gbps(doc, n.fabric);
            if (g > 0) n.gbps = g;
          }
        }
      }
      if (me->rates.nic_gbps <= 0)  // the host's fastest declared NIC is its link into the fabric
        for (auto& n : me->nics) me->rates.nic_gbps = std::max(me->rates.nic_gbps, n.gbps);
      return true;
    }
  }
  return false;
}

namespace {
// UCCL_TOPO_FILE, parsed once per process: every communicator (and sub-communicator) sees the
// same file. An empty document without a file.
Result<TopoValue>& topology_doc() {
  static std::mutex mu;
  static bool loaded = false;
  static Result<TopoValue> doc = TopoValue{};
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded) {
    if (!kTopoFile.get().empty()) doc = read_topology_file(kTopoFile.get());
    if (!doc.ok()) doc = doc.status().with_context("UCCL_TOPO_FILE");
    loaded = true;
  }
  return doc;
}
}  // namespace

Result<std::vector<std::string>> declared_rails(const std::string& host_id, const PeerInfo& me) {
  std::vector<std::string> out;
  if (kTopoFile.get().empty()) return out;
  Result<TopoValue>& doc = topology_doc();
  if (!doc.ok()) return doc.status();
  const TopoValue* clusters = doc.value().is_map() ? doc.value().get("clusters") : nullptr;
  if (!clusters || !clusters->is_list()) return out;
  for (auto& c : clusters->list) {
    const TopoValue* hosts = c.get("hosts");
    if (!hosts || !hosts->is_list()) continue;
    for (auto& h : hosts->list) {
      if (!host_matches(h, host_id, me)) continue;
      const TopoValue* rails = h.is_map() ? h.get("rails") : nullptr;
      if (!rails) return out;
      if (!rails->is_list())
        return InvalidArgument("UCCL_TOPO_FILE=" + kTopoFile.get() + ": 'rails' of a host must be a list of NIC names");
      for (auto& r : rails->list) out.push_back(r.as_string());
      return out;
    }
  }
  return out;
}

Status describe_local_host(PeerInfo* me, const std::vector<NicInfo>& rdma_nics) {
  for (auto& n : rdma_nics) me->nics.push_back(n);
  me->cluster = kCluster.get();
  const std::string& path = kTopoFile.get();
  if (path.empty()) return Status::Ok();
  Result<TopoValue>& doc = topology_doc();
  if (!doc.ok()) return doc.status();
  auto matched = apply_topology_doc(doc.value(), me->host_id, me);
  if (!matched.ok()) return matched.status().with_context("UCCL_TOPO_FILE=" + path);
  if (!matched.value())
    UCCL_WARN("UCCL_TOPO_FILE=%s has no entry for this host (%s); using discovered values", path.c_str(),
              me->hostname.c_str());
  return Status::Ok();
}

}  // namespace uccl
