"""The cost predictions the measurements are compared with (same model as cpp/topology/cost_model).

Grid s = (s0 ranks per host, s1 hosts per cluster, s2 clusters); per-rank link shares when
every rank sends at once: C0 = shared memory, C1 = host NIC / s0, C2 = cluster uplink / (s0 s1).

  hierarchical AG(D) = sum_k (s_k - 1) D / (s_0 ... s_k) / C_k      (RS the same, AR twice)
  which for two levels is AGtime(D,x,y,C_F,C_S) = (y-1)D/(x y C_S) + (x-1)D/(x C_F).
  flat ring AG(D)    = (n - 1) D / n / C_edge, C_edge = the slowest ring edge (one flow per
                       direction on the uplink between clusters: C_edge = uplink).
"""


def rates(intra_gbit, inter_gbit, s, shm_gbit=80.0):
    s0, s1, _ = s
    return [shm_gbit * 1e9 / 8, intra_gbit * 1e9 / 8 / s0, inter_gbit * 1e9 / 8 / (s0 * s1)]


def hier_time(coll, D, s, intra_gbit, inter_gbit):
    C = rates(intra_gbit, inter_gbit, s)
    t, inner = 0.0, 1
    for k, sk in enumerate(s):
        inner *= sk
        t += (sk - 1) * D / inner / C[k]
    return 2 * t if coll == "all_reduce" else t


def ring_time(coll, D, s, intra_gbit, inter_gbit):
    n = s[0] * s[1] * s[2]
    edge = min(inter_gbit, intra_gbit) * 1e9 / 8 if s[2] > 1 else intra_gbit * 1e9 / 8
    t = (n - 1) * D / n / edge
    return 2 * t if coll == "all_reduce" else t
