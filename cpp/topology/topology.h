// Topology: where every rank of a communicator sits, built from all ranks' PeerInfo.
//
// Physical levels: two ranks are on the same host (level 0, shared memory), in the same
// cluster (level 1, the cluster fabric), or in different clusters (level 2, the slow links
// between clusters). A rank's local rank is its index among its host's ranks; a rail is the
// set of ranks with the same local rank (in rail-only networks, those share a network plane).
//
// The algorithms' hierarchy is a grid derived from those levels: dims s_0 (ranks per host),
// s_1 (hosts per cluster), s_2 (clusters), innermost first, and coordinates (c_0, c_1, c_2)
// per rank. A ring along dim k runs among the ranks that share every other coordinate, so
// exchanging "across a level along rails" is a ring along that dim. A level whose groups
// are uneven (3 ranks on one host, 2 on another) cannot form rails: its boundary is dropped
// (merged into the next level up), and if only one dim is left the hierarchy is flat.
//
// Every rank builds the same Topology from the same PeerInfos, so decisions derived from it
// (the hierarchy, the algorithm choice) agree on all ranks without extra messages.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "uccl/store.h"
#include "uccl/status.h"
#include "topology/peer_info.h"

namespace uccl {

constexpr int kNumLevels = 3;
const char* level_name(int level);  // "host", "cluster", "inter_cluster"

// The physical level separating a and b (0 same host, 1 same cluster, 2 different clusters).
int pair_level(const PeerInfo& a, const PeerInfo& b);

class Topology {
 public:
  // peers[r] is rank r's PeerInfo. measured[l] (bytes/s, 0 = not measured): link rates found
  // by the communicator's probe (core/link_probe.h); declared rates still win over them.
  static std::shared_ptr<const Topology> build(std::vector<PeerInfo> peers, const double* measured = nullptr,
                                               const std::string& probe_note = "");
  // Fetches every rank's PeerInfo ("uccl/peer/<r>") from the store and builds.
  static Result<std::shared_ptr<const Topology>> fetch(Store& store, int size, double timeout_s);

  int size() const { return static_cast<int>(peers_.size()); }
  const PeerInfo& peer(int r) const { return peers_[r]; }
  int host_of(int r) const { return host_of_[r]; }
  int cluster_of(int r) const { return cluster_of_[r]; }
  int local_rank(int r) const { return local_rank_[r]; }
  int level(int a, int b) const;
  int num_hosts() const { return static_cast<int>(hosts_.size()); }
  int num_clusters() const { return static_cast<int>(clusters_.size()); }
  const std::vector<int>& host_members(int h) const { return hosts_[h]; }
  // Ranks with the same local rank as r, in rank order.
  std::vector<int> rail(int r) const;

  // The algorithms' grid: dims innermost first; hierarchical() when at least two dims.
  bool hierarchical() const { return dims_.size() >= 2; }
  const std::vector<int>& dims() const { return dims_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  int coord(int r, int dim) const { return coords_[r][dim]; }
  // The rank whose coordinates are r's except coord[dim] = v.
  int neighbor(int r, int dim, int v) const;
  // Ranks q with coord(q, i) == coord(r, i) for i < dim and coord(q, dim) == v: the chunk a
  // ring along `dim` exchanges (the same set for hierarchical all-gather and reduce-scatter).
  std::vector<int> chunk(int r, int dim, int v) const;
  // r's position when coordinates are read with dim 0 most significant: blocks numbered this
  // way make every chunk a contiguous range (all_reduce lays its internal blocks out so).
  int nested_index(int r) const;
  const std::string& flat_reason() const { return flat_reason_; }

  // Declared, measured or discovered rates in bytes/s (declared > measured > sysfs > default): [0] per rank inside a host, [1] per host NIC,
  // [2] per cluster uplink (0 = unknown: no shared bottleneck assumed between clusters).
  double rate(int level) const { return rate_[level]; }
  const std::string& rate_source(int level) const { return rate_src_[level]; }
  // The probe's figure for a level (bytes/s, 0 = not probed) and what the probe said overall.
  double measured_rate(int level) const { return measured_[level]; }
  const std::string& probe_note() const { return probe_note_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }

  // `path_to(me, peer)` describes the path to each peer ("tcp via eth0 -> ..."). Which
  // transport carries a pair is the transports' decision (transports/path_choice.h), one floor
  // up, so the caller passes it in; without it the path lines are left out.
  using PathDescriber = std::function<std::string(const PeerInfo& me, const PeerInfo& peer)>;
  std::string describe(int my_rank, const PathDescriber& path_to = nullptr) const;

 private:
  std::vector<PeerInfo> peers_;
  std::vector<int> host_of_, cluster_of_, local_rank_;
  std::vector<std::vector<int>> hosts_, clusters_;  // members in rank order / host order
  std::vector<int> dims_;
  std::vector<std::string> dim_names_;
  std::vector<std::vector<int>> coords_;
  std::map<std::vector<int>, int> rank_at_;
  std::string flat_reason_;
  double rate_[kNumLevels] = {0, 0, 0};
  std::string rate_src_[kNumLevels];
  double measured_[kNumLevels] = {0, 0, 0};
  std::string probe_note_;
  void build_grid();
  void build_rates();
};

// Builds the communicator's Topology on first use (fetching the PeerInfos from the store)
// and keeps it. Thread safe; a failed fetch is remembered and not retried on every op.
class TopologyCache {
 public:
  Result<std::shared_ptr<const Topology>> get(Store& store, int size, double timeout_s);
  std::shared_ptr<const Topology> get_if_built();

 private:
  std::mutex mu_;
  std::shared_ptr<const Topology> topo_;
  Status failed_;
};

}  // namespace uccl
