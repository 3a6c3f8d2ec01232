#include "topology/cost_model.h"

#include <algorithm>
#include <limits>
#include <map>

namespace uccl {
namespace {

// Per-message overhead of a phase: a network round of the tcp transport vs a shm handoff.
constexpr double kNetLatencyS = 30e-6;
constexpr double kHostLatencyS = 5e-6;

double steps_factor(CostOp op) { return op == CostOp::kAllReduce ? 2 : 1; }

}  // namespace

double phase_time(const Topology& t, const std::vector<Flow>& flows) {
  std::map<int, int> egress, ingress, up, down;
  for (const Flow& f : flows) {
    const int lvl = t.level(f.src, f.dst);
    if (lvl >= 1) {
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
    double bw = t.rate(0);
    if (lvl >= 1)
      bw = std::min(t.rate(1) / egress[t.host_of(f.src)], t.rate(1) / ingress[t.host_of(f.dst)]);
    if (lvl == 2 && t.rate(2) > 0)
      bw = std::min({bw, t.rate(2) / up[t.cluster_of(f.src)], t.rate(2) / down[t.cluster_of(f.dst)]});
    worst = std::max(worst, f.bytes / bw);
  }
  return worst + (flows.empty() ? 0 : top == 0 ? kHostLatencyS : kNetLatencyS);
}

double predict_flat_ring(const Topology& t, CostOp op, double total_bytes) {
  const int n = t.size();
  if (n < 2) return 0;
  std::vector<Flow> flows;
  for (int r = 0; r < n; ++r) flows.push_back({r, (r + 1) % n, total_bytes / n});
  return steps_factor(op) * (n - 1) * phase_time(t, flows);
}

double predict_hierarchical(const Topology& t, CostOp op, double total_bytes) {
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
  return steps_factor(op) * total;
}

}  // namespace uccl
