#include "topology/declared_topology.h"

#include <fstream>
#include <map>
#include <sstream>

#include "topology/local_host.h"

namespace uccl {
namespace {

std::string name_of(const TopoValue& host) {
  if (!host.is_map()) return host.as_string();
  const TopoValue* n = host.get("name");
  return n ? n->as_string() : "";
}

// The file's entry for host `name` (nullptr if none).
const TopoValue* host_entry(const TopoValue& doc, const std::string& name) {
  const TopoValue* clusters = doc.get("clusters");
  if (!clusters || !clusters->is_list()) return nullptr;
  for (auto& c : clusters->list) {
    const TopoValue* hosts = c.get("hosts");
    if (!hosts || !hosts->is_list()) continue;
    for (auto& h : hosts->list)
      if (name_of(h) == name) return &h;
  }
  return nullptr;
}

// The PeerInfo a rank on `host` would publish: the declared NICs stand for discovered ones
// (apply_topology_doc then gives them fabrics and rates as it does on a real host).
Result<PeerInfo> declared_peer(const TopoValue& doc, const std::string& host) {
  const TopoValue* entry = host_entry(doc, host);
  if (!entry) return InvalidArgument("host '" + host + "' is not in the topology file");
  PeerInfo p;
  p.host_id = p.hostname = host;
  const TopoValue* nics = entry->is_map() ? entry->get("nics") : nullptr;
  if (nics && nics->is_list())
    for (auto& d : nics->list) {
      NicInfo n;
      n.name = d.get("name") ? d.get("name")->as_string() : "";
      n.kind = d.get("kind") ? d.get("kind")->as_string() : "tcp";
      p.nics.push_back(n);
    }
  auto matched = apply_topology_doc(doc, host, &p);
  if (!matched.ok()) return matched.status();
  return p;
}

}  // namespace

Result<TopoValue> read_topology_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return InvalidArgument(path + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_topo_text(ss.str(), path);
}

Result<std::shared_ptr<const Topology>> declared_topology(const TopoValue& doc,
                                                          const std::vector<std::string>& placement) {
  if (placement.empty()) return InvalidArgument("placement is empty: give one host name per rank");
  if (!doc.is_map()) return InvalidArgument("topology: the top level must be a mapping");
  std::map<std::string, PeerInfo> hosts;  // every rank of a host publishes the same description
  std::vector<PeerInfo> peers;
  for (size_t r = 0; r < placement.size(); ++r) {
    auto it = hosts.find(placement[r]);
    if (it == hosts.end()) {
      auto p = declared_peer(doc, placement[r]);
      if (!p.ok()) return p.status().with_context("placement[" + std::to_string(r) + "]");
      it = hosts.emplace(placement[r], p.take()).first;
    }
    peers.push_back(it->second);
    peers.back().rank = static_cast<int>(r);
  }
  return Topology::build(std::move(peers));
}

}  // namespace uccl
