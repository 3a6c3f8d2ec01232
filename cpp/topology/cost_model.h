// Cost model: predicted time of every algorithm the selection table (algorithms/select.h) can
// choose among, on a Topology, so that one place compares them with one set of numbers. The
// same functions serve the communicator and Python (uccl.cost), so a planner sees exactly the
// predictions uccl itself acts on.
//
// A collective is a sequence of phases; in a phase a set of flows (src -> dst, bytes) run at the
// same time. A flow's rate is the tightest of the links it crosses divided by how many flows of
// the phase share that link: the sender host's NIC (egress) and the receiver's (ingress) for
// flows between hosts, plus the clusters' uplink/downlink for flows between clusters (when its
// rate is known); inside a host each rank's shared-memory rate is split among the flows it
// sends (or receives) in that phase. A phase lasts as long as its slowest flow plus a fixed
// latency (a network round of the tcp transport, or a shared-memory handoff when the phase stays
// on one host): that latency term is what makes few-step algorithms (two-shot, rhd) win on one host.
//
// For the rail-only grid the hierarchical prediction reduces to
// AGtime(D,x,y,C_F,C_S) = (y-1)D/(x*y*C_S) + (x-1)D/(x*C_F) with C_S the per-rank share of the
// slow link; for the flat ring it is (n-1) steps of D/n at the slowest ring edge.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"

namespace uccl {

// The shape of a collective for the model. D ("total bytes") is the size of the full vector:
// the gathered output of all_gather / gather, the reduced vector of all_reduce / reduce /
// reduce_scatter, the broadcast buffer, the whole input of scatter, one rank's send buffer of
// all_to_all. Rooted collectives take their root.
enum class CostOp { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce, kAllToAll, kGather, kScatter, kBarrier };

struct Flow {
  int src, dst;
  double bytes;
};

// Seconds for one phase in which all `flows` run concurrently (0 for no flows).
double phase_time(const Topology& t, const std::vector<Flow>& flows);

// Predictions in seconds; total_bytes = D as above. Each returns -1 for a collective the
// algorithm has no schedule for.
// Ring: reduce-scatter / all-gather rings; all_reduce both; broadcast = scatter + ring
// all-gather; reduce = ring reduce-scatter + gather at the root.
double predict_flat_ring(const Topology& t, CostOp op, double total_bytes, int root = 0);
// Direct: every message in one phase (all_reduce: everyone sends everything to everyone).
double predict_direct(const Topology& t, CostOp op, double total_bytes, int root = 0);
// Recursive halving/doubling all_reduce (power-of-two groups): 2 log2(n) pairwise steps.
double predict_halving_doubling(const Topology& t, CostOp op, double total_bytes);
// Two-shot all_reduce / reduce_scatter: one all-pairs phase of blocks (each rank gets its block
// from everyone), and for all_reduce a second one that gives every block to everyone.
double predict_two_shot(const Topology& t, CostOp op, double total_bytes);
// Rings along the grid's dims (all_gather, reduce_scatter, all_reduce).
double predict_hierarchical(const Topology& t, CostOp op, double total_bytes);
// Dissemination barrier: ceil(log2 n) rounds of empty messages.
double predict_dissemination(const Topology& t);
// One message from src to dst, alone on the links.
double predict_p2p(const Topology& t, int src, int dst, double bytes);

}  // namespace uccl
