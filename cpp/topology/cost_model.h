// Cost model: predicted time of flat-ring and hierarchical all_gather / reduce_scatter /
// all_reduce on a Topology, used to choose between them.
//
// A collective is a sequence of phases; in each, every rank sends one message to one peer at
// the same time. A flow's rate is the tightest of the links it crosses divided by how many
// flows of the phase share that link: the sender host's NIC (egress) and the receiver's
// (ingress) for flows between hosts, plus the clusters' uplink/downlink for flows between
// clusters (when its rate is known), shared memory per rank inside a host. A phase lasts as
// long as its slowest flow plus a fixed latency. For the rail-only grid this reduces to
// AGtime(D,x,y,C_F,C_S) = (y-1)D/(x*y*C_S) + (x-1)D/(x*C_F) with C_S the per-rank share of the
// slow link; for the flat ring it is (n-1) steps of D/n at the slowest ring edge.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"

namespace uccl {

enum class CostOp { kAllGather, kReduceScatter, kAllReduce };

struct Flow {
  int src, dst;
  double bytes;
};

// Seconds for one phase in which all `flows` run concurrently.
double phase_time(const Topology& t, const std::vector<Flow>& flows);
// total_bytes = D, the size of the full (gathered / reduced) vector.
double predict_flat_ring(const Topology& t, CostOp op, double total_bytes);
double predict_hierarchical(const Topology& t, CostOp op, double total_bytes);

}  // namespace uccl
