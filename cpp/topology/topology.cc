#include "topology/topology.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/log.h"

namespace uccl {

const char* level_name(int level) {
  switch (level) {
    case 0: return "host";
    case 1: return "cluster";
    case 2: return "inter_cluster";
  }
  return "?";
}

int pair_level(const PeerInfo& a, const PeerInfo& b) {
  if (a.host_id == b.host_id) return 0;
  return a.cluster == b.cluster ? 1 : 2;
}

namespace {

// Groups that partition the ranks, each a list of ranks; the chain host -> cluster -> world.
using Partition = std::vector<std::vector<int>>;

// Rails need equal sizes: every inner group the same size, every outer group holding the
// same number of inner groups.
bool regular(const Partition& inner, const Partition& outer, const std::vector<int>& inner_of) {
  for (auto& g : inner)
    if (g.size() != inner[0].size()) return false;
  size_t per = 0;
  for (size_t o = 0; o < outer.size(); ++o) {
    std::set<int> ids;
    for (int r : outer[o]) ids.insert(inner_of[r]);
    if (o == 0) per = ids.size();
    if (ids.size() != per) return false;
  }
  return true;
}

std::string fmt_gbps(double bytes_per_s) {
  char b[32];
  snprintf(b, sizeof b, "%.3g Gbit/s", bytes_per_s * 8 / 1e9);
  return b;
}

}  // namespace

std::shared_ptr<const Topology> Topology::build(std::vector<PeerInfo> peers, const double* measured,
                                                const std::string& probe_note) {
  auto t = std::shared_ptr<Topology>(new Topology());
  t->peers_ = std::move(peers);
  for (int l = 0; l < kNumLevels && measured; ++l) t->measured_[l] = measured[l] > 0 ? measured[l] : 0;
  t->probe_note_ = probe_note;
  const int n = t->size();
  t->host_of_.assign(n, -1);
  t->cluster_of_.assign(n, -1);
  t->local_rank_.assign(n, 0);
  // Hosts in order of their lowest rank; a host's cluster is that of its lowest rank (ranks of
  // one host that claim different clusters are a configuration error; the first one wins).
  std::map<std::string, int> host_ids, cluster_ids;
  std::vector<int> cluster_of_host;
  for (int r = 0; r < n; ++r) {
    const PeerInfo& p = t->peers_[r];
    auto [it, fresh] = host_ids.emplace(p.host_id, static_cast<int>(t->hosts_.size()));
    if (fresh) {
      t->hosts_.emplace_back();
      auto [cit, cfresh] = cluster_ids.emplace(p.cluster, static_cast<int>(t->clusters_.size()));
      if (cfresh) t->clusters_.emplace_back();
      cluster_of_host.push_back(cit->second);
    } else if (p.cluster != t->peers_[t->hosts_[it->second][0]].cluster) {
      UCCL_WARN("rank %d says cluster '%s' but its host's rank %d says '%s'; using the latter", r, p.cluster.c_str(),
                t->hosts_[it->second][0], t->peers_[t->hosts_[it->second][0]].cluster.c_str());
    }
    const int h = it->second;
    t->host_of_[r] = h;
    t->local_rank_[r] = static_cast<int>(t->hosts_[h].size());
    t->hosts_[h].push_back(r);
    t->cluster_of_[r] = cluster_of_host[h];
  }
  for (int h = 0; h < t->num_hosts(); ++h)
    for (int r : t->hosts_[h]) t->clusters_[cluster_of_host[h]].push_back(r);
  t->build_grid();
  t->build_rates();
  return t;
}

void Topology::build_grid() {
  const int n = size();
  std::vector<int> world_of(n, 0);
  Partition world = {{}};
  for (int r = 0; r < n; ++r) world[0].push_back(r);
  // Candidate chains, best first: keep both boundaries, then the cluster one (the slow links
  // matter most), then the host one. The first regular chain wins.
  struct Level {
    const Partition* p;
    const std::vector<int>* of;
    const char* name;
  };
  const Level host{&hosts_, &host_of_, "host"}, cluster{&clusters_, &cluster_of_, "cluster"};
  const Level top{&world, &world_of, "world"};
  std::vector<std::vector<Level>> chains = {{host, cluster, top}, {cluster, top}, {host, top}};
  std::vector<Level> chosen = {top};
  bool irregular = false;
  for (auto& chain : chains) {
    bool ok = true, trivial = false;
    for (size_t i = 0; i + 1 < chain.size() && ok; ++i) {
      ok = regular(*chain[i].p, *chain[i + 1].p, *chain[i].of);
      // A level that adds nothing (one rank per host, one host per cluster, one cluster)
      // would make a dim of size 1: leave it to the shorter chains.
      trivial |= chain[i].p->size() == chain[i + 1].p->size() || (*chain[i].p)[0].size() == 1;
    }
    irregular |= !ok;
    if (ok && !trivial) {
      chosen = chain;
      break;
    }
  }
  if (chosen.size() == 1)
    flat_reason_ = num_hosts() == 1 ? "all ranks on one host"
                   : irregular ? "uneven levels (hosts or clusters hold different numbers of ranks): no rails"
                               : "a single level";
  // Coordinates: dim k is the index of r's level-(k-1) group inside its level-k group (or of r
  // itself in its innermost group), groups taken in rank order of their members.
  coords_.assign(n, {});
  for (size_t k = 0; k < chosen.size(); ++k) {
    const Partition& outer = *chosen[k].p;
    int size_k = 0;
    for (auto& g : outer) {
      std::vector<int> subs;  // inner groups (or ranks) of g, in first-seen order
      for (int r : g) {
        int id = k == 0 ? r : (*chosen[k - 1].of)[r];
        if (std::find(subs.begin(), subs.end(), id) == subs.end()) subs.push_back(id);
      }
      for (int r : g) {
        int id = k == 0 ? r : (*chosen[k - 1].of)[r];
        coords_[r].push_back(static_cast<int>(std::find(subs.begin(), subs.end(), id) - subs.begin()));
      }
      size_k = static_cast<int>(subs.size());
    }
    dims_.push_back(size_k);
    dim_names_.push_back(k == 0 ? std::string("in-") + chosen[k].name
                                : std::string(chosen[k - 1].name) + "s-in-" + chosen[k].name);
  }
  for (int r = 0; r < n; ++r) rank_at_[coords_[r]] = r;
}

void Topology::build_rates() {
  // The slowest declaration wins: every rank computes the same number from the same PeerInfos.
  double declared[kNumLevels] = {0, 0, 0}, nic = 0;
  bool have[kNumLevels] = {true, true, true};
  for (auto& p : peers_) {
    const double d[kNumLevels] = {p.rates.host_gbps, p.rates.nic_gbps, p.rates.uplink_gbps};
    for (int l = 0; l < kNumLevels; ++l) {
      if (d[l] <= 0) have[l] = false;
      else declared[l] = declared[l] > 0 ? std::min(declared[l], d[l]) : d[l];
    }
    double best = 0;
    for (auto& nn : p.nics) best = std::max(best, nn.gbps);
    if (best > 0) nic = nic > 0 ? std::min(nic, best) : best;
  }
  // Undeclared: shared memory ~ a memory copy per rank; NICs at their sysfs speed (or 10
  // Gbit/s); between clusters no shared bottleneck is assumed (it would be a guess).
  rate_[0] = (have[0] ? declared[0] : 80.0) * 1e9 / 8;
  rate_src_[0] = have[0] ? "declared" : "default";
  rate_[1] = (have[1] ? declared[1] : nic > 0 ? nic : 10.0) * 1e9 / 8;
  rate_src_[1] = have[1] ? "declared" : nic > 0 ? "nic speed" : "default";
  rate_[2] = have[2] ? declared[2] * 1e9 / 8 : 0;
  rate_src_[2] = have[2] ? "declared" : "unknown";
  // A probe's figure replaces what the interface says (a tc-shaped veth reports its 10 Gbit/s
  // nominal speed), never a declaration: the file is the operator's word.
  for (int l = 0; l < kNumLevels; ++l) {
    if (have[l] || measured_[l] <= 0) continue;
    rate_[l] = measured_[l];
    rate_src_[l] = "measured";
  }
}

int Topology::level(int a, int b) const {
  if (host_of_[a] == host_of_[b]) return 0;
  return cluster_of_[a] == cluster_of_[b] ? 1 : 2;
}

std::vector<int> Topology::rail(int r) const {
  std::vector<int> out;
  for (int q = 0; q < size(); ++q)
    if (local_rank_[q] == local_rank_[r]) out.push_back(q);
  return out;
}

int Topology::neighbor(int r, int dim, int v) const {
  std::vector<int> c = coords_[r];
  c[dim] = v;
  auto it = rank_at_.find(c);
  return it == rank_at_.end() ? -1 : it->second;
}

std::vector<int> Topology::chunk(int r, int dim, int v) const {
  std::vector<int> out;
  for (int q = 0; q < size(); ++q) {
    if (coords_[q][dim] != v) continue;
    bool same = true;
    for (int i = 0; i < dim && same; ++i) same = coords_[q][i] == coords_[r][i];
    if (same) out.push_back(q);
  }
  return out;
}

int Topology::nested_index(int r) const {
  int idx = 0;
  for (size_t k = 0; k < dims_.size(); ++k) idx = idx * dims_[k] + coords_[r][k];
  return idx;
}

std::string Topology::describe(int me, const PathDescriber& path_to) const {
  std::string s = "topology: " + std::to_string(size()) + " ranks, " + std::to_string(num_hosts()) + " hosts, " +
                  std::to_string(num_clusters()) + " clusters\n";
  for (int c = 0; c < num_clusters(); ++c) {
    const std::string& name = peers_[clusters_[c][0]].cluster;
    s += "  cluster " + std::to_string(c) + " '" + (name.empty() ? "(unnamed)" : name) + "':";
    int last_host = -1;
    for (int r : clusters_[c]) {
      if (host_of_[r] != last_host)
        s += std::string(last_host < 0 ? " " : "] ") + "host" + std::to_string(host_of_[r]) + ":" + peers_[r].hostname + "[";
      else s += ",";
      s += std::to_string(r);
      last_host = host_of_[r];
    }
    s += "]\n";
  }
  s += "  links: host " + fmt_gbps(rate_[0]) + " (" + rate_src_[0] + "), host nic " + fmt_gbps(rate_[1]) + " (" +
       rate_src_[1] + "), cluster uplink " + (rate_[2] > 0 ? fmt_gbps(rate_[2]) : std::string("-")) + " (" +
       rate_src_[2] + ")\n";
  if (!probe_note_.empty()) {
    s += "  probe: " + probe_note_;
    for (int l = 0; l < kNumLevels; ++l)
      if (measured_[l] > 0) s += std::string(", ") + level_name(l) + " " + fmt_gbps(measured_[l]);
    s += "\n";
  }
  s += "  hierarchy:";
  for (size_t k = 0; k < dims_.size(); ++k) s += " " + dim_names_[k] + "=" + std::to_string(dims_[k]);
  if (!hierarchical()) s += " (flat: " + flat_reason_ + ")";
  s += "\n";
  if (me >= 0 && me < size()) {
    s += "  rank " + std::to_string(me) + ": host" + std::to_string(host_of_[me]) + ":" + peers_[me].hostname + ", local rank " +
         std::to_string(local_rank_[me]) + ", cluster '" + peers_[me].cluster + "', coords (";
    for (size_t k = 0; k < dims_.size(); ++k) s += (k ? "," : "") + std::to_string(coords_[me][k]);
    s += "), rail {";
    auto rl = rail(me);
    for (size_t i = 0; i < rl.size(); ++i) s += (i ? "," : "") + std::to_string(rl[i]);
    s += "}\n";
    for (int q = 0; q < size() && path_to; ++q) {
      if (q == me) continue;
      s += "  path to rank " + std::to_string(q) + " (" + level_name(level(me, q)) + " level): " +
           path_to(peers_[me], peers_[q]) + "\n";
    }
  }
  return s;
}

Result<std::shared_ptr<const Topology>> Topology::fetch(Store& store, int size, double timeout_s) {
  std::vector<PeerInfo> peers;
  for (int r = 0; r < size; ++r) {
    auto text = store.get("uccl/peer/" + std::to_string(r), timeout_s);
    if (!text.ok()) return text.status().with_context("topology: PeerInfo of rank " + std::to_string(r));
    auto p = PeerInfo::parse(text.value());
    if (!p.ok()) return p.status().with_context("topology: PeerInfo of rank " + std::to_string(r));
    peers.push_back(p.take());
  }
  return build(std::move(peers));
}

Result<std::shared_ptr<const Topology>> TopologyCache::get(Store& store, int size, double timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (topo_) return topo_;
  if (!failed_.ok()) return failed_;
  auto t = Topology::fetch(store, size, timeout_s);
  if (!t.ok()) {
    failed_ = t.status();
    return failed_;
  }
  topo_ = t.take();
  return topo_;
}

std::shared_ptr<const Topology> TopologyCache::get_if_built() {
  std::lock_guard<std::mutex> lock(mu_);
  return topo_;
}

}  // namespace uccl
