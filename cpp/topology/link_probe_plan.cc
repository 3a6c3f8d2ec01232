#include "topology/link_probe_plan.h"

#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

namespace uccl {
namespace {

bool declared(const Topology& t, int level) { return t.rate_source(level) == "declared"; }

std::string host_key(const PeerInfo& p) {
  std::string k = p.host_id;
  for (auto& a : p.listen) k += "," + a.substr(0, a.rfind(':'));  // addresses without the port
  return k;
}

ProbeItem item(const Topology& t, int level, std::vector<std::pair<int, int>> pairs) {
  ProbeItem it;
  it.level = level;
  it.pairs = std::move(pairs);
  it.key = "L" + std::to_string(level);
  for (auto& [a, b] : it.pairs) it.key += "|" + host_key(t.peer(a)) + ">" + host_key(t.peer(b));
  for (char& c : it.key)
    if (c == ' ' || c == '\n') c = '_';
  return it;
}

}  // namespace

std::vector<ProbeItem> probe_plan(const Topology& t, ProbeMode mode) {
  std::vector<ProbeItem> plan;
  if (mode == ProbeMode::kOff || t.size() < 2) return plan;
  std::vector<ProbeItem> present;
  for (int h = 0; h < t.num_hosts(); ++h) {
    const auto& m = t.host_members(h);
    if (m.size() >= 2) {
      present.push_back(item(t, 0, {{m[0], m[1]}}));
      break;
    }
  }
  // Hosts per cluster, in host order (host_members' first rank is the host's leader).
  std::vector<std::vector<int>> cluster_hosts(t.num_clusters());
  for (int h = 0; h < t.num_hosts(); ++h) cluster_hosts[t.cluster_of(t.host_members(h)[0])].push_back(h);
  for (auto& hs : cluster_hosts) {
    if (hs.size() >= 2) {
      present.push_back(item(t, 1, {{t.host_members(hs[0])[0], t.host_members(hs[1])[0]}}));
      break;
    }
  }
  if (t.num_clusters() >= 2) {
    std::vector<std::pair<int, int>> pairs;
    for (size_t i = 0; i < cluster_hosts[0].size() && i < cluster_hosts[1].size(); ++i)
      pairs.emplace_back(t.host_members(cluster_hosts[0][i])[0], t.host_members(cluster_hosts[1][i])[0]);
    present.push_back(item(t, 2, pairs));
  }
  if (mode == ProbeMode::kOn) return present;
  // auto: with a single level present every candidate runs at the same rate; rates decide
  // nothing worth a probe. Otherwise the levels the file leaves open.
  if (present.size() < 2) return plan;
  for (auto& it : present)
    if (!declared(t, it.level)) plan.push_back(it);
  return plan;
}

double probe_cache_lookup(const std::string& path, const std::string& key, double max_age_s) {
  if (max_age_s <= 0 || path.empty()) return 0;
  std::ifstream in(path);
  std::string line;
  double found = 0;
  const double now = static_cast<double>(time(nullptr));
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    double when = 0, rate = 0;
    std::string k;
    if (!(ls >> when >> rate >> k) || k != key) continue;
    found = now - when <= max_age_s && rate > 0 ? rate : 0;  // the last line for a key wins
  }
  return found;
}

void probe_cache_store(const std::string& path, const std::string& key, double bytes_per_s) {
  if (path.empty() || bytes_per_s <= 0) return;
  FILE* f = fopen(path.c_str(), "a");
  if (!f) return;
  flock(fileno(f), LOCK_EX);  // whole lines from concurrent writers
  fprintf(f, "%.0f %.6g %s\n", static_cast<double>(time(nullptr)), bytes_per_s, key.c_str());
  flock(fileno(f), LOCK_UN);
  fclose(f);
}

}  // namespace uccl
