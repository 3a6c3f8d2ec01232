"""The cost predictions the measurements are compared with: uccl's own cost model
(cpp/topology/cost_model through uccl.cost), on the topology file the testbed declares.

Grid s = (s0 ranks per host, s1 hosts per cluster, s2 clusters). For the rail-only
hierarchical schedule the model gives AGtime(D,x,y,C_F,C_S) = (y-1)D/(x y C_S) + (x-1)D/(x C_F)
plus a latency per step; for the flat ring (n - 1) steps of D/n at the slowest ring edge.
"""
from uccl import cost

from netbed import topology_doc


def topology(s, intra_gbit, inter_gbit):
    s0, s1, s2 = s
    placement = [f"c{c}h{h}" for c in range(s2) for h in range(s1) for _ in range(s0)]
    return cost.Topology.from_dict(topology_doc(s2, s1, intra_gbit, inter_gbit), placement)


def hier_time(coll, D, s, intra_gbit, inter_gbit):
    return cost.predict(topology(s, intra_gbit, inter_gbit), coll, D, algorithm="hier")


def ring_time(coll, D, s, intra_gbit, inter_gbit):
    return cost.predict(topology(s, intra_gbit, inter_gbit), coll, D, algorithm="ring")
