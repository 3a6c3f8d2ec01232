#include "topology/cost_model.h"

#include <algorithm>

namespace uccl {
namespace {

// Per-message overhead of a phase: a network round of the tcp transport vs a shm handoff.
constexpr double kNetLatencyS = 30e-6;
constexpr double kHostLatencyS = 5e-6;

bool reduces_twice(CostOp op) { return op == CostOp::kAllReduce; }

// Every rank sends `bytes` to (rank + 1) % n.
std::vector<Flow> ring_flows(int n, double bytes) {
  std::vector<Flow> flows;
  for (int r = 0; r < n; ++r) flows.push_back({r, (r + 1) % n, bytes});
  return flows;
}

// Every rank sends `bytes` to every other rank.
std::vector<Flow> all_pairs(int n, double bytes) {
  std::vector<Flow> flows;
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      if (p != r) flows.push_back({r, p, bytes});
  return flows;
}

// The root sends `bytes` to every other rank (towards = false) or receives them (true).
std::vector<Flow> star(int n, int root, double bytes, bool towards) {
  std::vector<Flow> flows;
  for (int p = 0; p < n; ++p)
    if (p != root) flows.push_back(towards ? Flow{p, root, bytes} : Flow{root, p, bytes});
  return flows;
}

}  // namespace

double phase_time(const Topology& t, const std::vector<Flow>& flows) {
  if (flows.empty()) return 0;
  std::vector<int> egress(t.num_hosts()), ingress(t.num_hosts()), up(t.num_clusters()), down(t.num_clusters());
  std::vector<int> rank_out(t.size()), rank_in(t.size());
  for (const Flow& f : flows) {
    const int lvl = t.level(f.src, f.dst);
    if (lvl == 0) {
      rank_out[f.src]++;
      rank_in[f.dst]++;
    } else {
      egress[t.host_of(f.src)]++;
      ingress[t.host_of(f.dst)]++;
    }
    if (lvl == 2) {
      up[t.cluster_of(f.src)]++;
      down[t.cluster_of(f.dst)]++;
    }
  }
  double worst = 0;
  int top = 0;
  for (const Flow& f : flows) {
    const int lvl = t.level(f.src, f.dst);
    top = std::max(top, lvl);
    double bw = t.rate(0) / std::max(rank_out[f.src], rank_in[f.dst]);
    if (lvl >= 1)
      bw = std::min(t.rate(1) / egress[t.host_of(f.src)], t.rate(1) / ingress[t.host_of(f.dst)]);
    if (lvl == 2 && t.rate(2) > 0)
      bw = std::min({bw, t.rate(2) / up[t.cluster_of(f.src)], t.rate(2) / down[t.cluster_of(f.dst)]});
    worst = std::max(worst, f.bytes / bw);
  }
  return worst + (top == 0 ? kHostLatencyS : kNetLatencyS);
}

double predict_flat_ring(const Topology& t, CostOp op, double total_bytes, int root) {
  const int n = t.size();
  if (n < 2) return 0;
  const double step = phase_time(t, ring_flows(n, total_bytes / n));
  switch (op) {
    case CostOp::kAllGather:
    case CostOp::kReduceScatter: return (n - 1) * step;
    case CostOp::kAllReduce: return 2 * (n - 1) * step;
    case CostOp::kBroadcast: return phase_time(t, star(n, root, total_bytes / n, false)) + (n - 1) * step;
    case CostOp::kReduce: return (n - 1) * step + phase_time(t, star(n, root, total_bytes / n, true));
    default: return -1;
  }
}

double predict_direct(const Topology& t, CostOp op, double total_bytes, int root) {
  const int n = t.size();
  if (n < 2) return 0;
  const double block = total_bytes / n;
  switch (op) {
    case CostOp::kAllGather:
    case CostOp::kReduceScatter:
    case CostOp::kAllToAll: return phase_time(t, all_pairs(n, block));
    case CostOp::kAllReduce: return phase_time(t, all_pairs(n, total_bytes));
    case CostOp::kBroadcast: return phase_time(t, star(n, root, total_bytes, false));
    case CostOp::kReduce: return phase_time(t, star(n, root, total_bytes, true));
    case CostOp::kGather: return phase_time(t, star(n, root, block, true));
    case CostOp::kScatter: return phase_time(t, star(n, root, block, false));
    default: return -1;
  }
}

double predict_halving_doubling(const Topology& t, CostOp op, double total_bytes) {
  const int n = t.size();
  if (op != CostOp::kAllReduce || n < 1 || (n & (n - 1)) != 0) return -1;
  // Step at distance d exchanges d/n of the vector with rank ^ d, once halving, once doubling.
  double total = 0;
  for (int d = n / 2; d >= 1; d /= 2) {
    std::vector<Flow> flows;
    for (int r = 0; r < n; ++r) flows.push_back({r, r ^ d, total_bytes * d / n});
    total += 2 * phase_time(t, flows);
  }
  return total;
}

double predict_two_shot(const Topology& t, CostOp op, double total_bytes) {
  const int n = t.size();
  if ((op != CostOp::kAllReduce && op != CostOp::kReduceScatter) || n < 1) return -1;
  return (reduces_twice(op) ? 2 : 1) * phase_time(t, all_pairs(n, total_bytes / n));
}

double predict_hierarchical(const Topology& t, CostOp op, double total_bytes) {
  if (op != CostOp::kAllGather && op != CostOp::kReduceScatter && op != CostOp::kAllReduce) return -1;
  const auto& dims = t.dims();
  double total = 0, inner = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    inner *= dims[k];
    if (dims[k] < 2) continue;
    std::vector<Flow> flows;
    for (int r = 0; r < t.size(); ++r)
      flows.push_back({r, t.neighbor(r, static_cast<int>(k), (t.coord(r, static_cast<int>(k)) + 1) % dims[k]),
                       total_bytes / inner});
    total += (dims[k] - 1) * phase_time(t, flows);
  }
  return (reduces_twice(op) ? 2 : 1) * total;
}

double predict_dissemination(const Topology& t) {
  const int n = t.size();
  double total = 0;
  for (int d = 1; d < n; d *= 2) {
    std::vector<Flow> flows;
    for (int r = 0; r < n; ++r) flows.push_back({r, (r + d) % n, 0});
    total += phase_time(t, flows);
  }
  return total;
}

double predict_p2p(const Topology& t, int src, int dst, double bytes) {
  if (src == dst) return 0;
  return phase_time(t, {{src, dst, bytes}});
}

}  // namespace uccl
