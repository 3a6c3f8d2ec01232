"""Paper-scale clusters and models (public figures) for planning without a cluster file.

GPUs: A100 80 GB (312 TFLOP/s bf16), H100 80 GB (989 TFLOP/s bf16), efficiency 0.5; 8 per
host on NVLink (A100: 2.4 Tbit/s, H100: 3.6 Tbit/s per host), one 200 (A100) / 400 (H100)
Gbit/s NIC per GPU on the cluster fabric, clusters of 256 GPUs joined at 12.5% of their
injection bandwidth. Models: the rail-only paper's GPT configurations (145.6B, 1T).
"""
from __future__ import annotations

from .spec import Cluster, DeviceKind, ModelSpec

GPUS = {"a100": (312.0, 2400.0, 200.0), "h100": (989.0, 3600.0, 400.0)}
MODELS = {
    "gpt-145b": dict(layers=80, hidden=12288, heads=96, seq=2048, vocab=51200, global_batch=1536),
    "gpt-1t": dict(layers=128, hidden=25600, heads=160, seq=2048, vocab=51200, global_batch=4096),
}


def gpu_cluster(kind: str, n_gpus: int, per_host: int = 8, hosts_per_cluster: int = 32) -> Cluster:
    tflops, host_gbps, nic_gbps = GPUS[kind]
    dev = DeviceKind(kind, tflops * 1e12 * 0.5, 80 * (1 << 30))
    n_hosts = n_gpus // per_host
    clusters, placement = [], []
    for c in range((n_hosts + hosts_per_cluster - 1) // hosts_per_cluster):
        hosts = [f"{kind}-c{c}-h{h}" for h in range(min(hosts_per_cluster, n_hosts - c * hosts_per_cluster))]
        fabric = f"fab{c}"
        clusters.append({"name": f"c{c}", "fabric": fabric, "nic_gbps": nic_gbps * per_host,
                         "uplink_gbps": nic_gbps * per_host * len(hosts) / 8,
                         "hosts": [{"name": h, "nics": [{"name": "nic0", "kind": "ib", "fabric": fabric,
                                                        "gbps": nic_gbps * per_host}]} for h in hosts]})
        for h in hosts:
            placement += [h] * per_host
    topo = {"host_gbps": host_gbps, "inter_cluster_gbps": nic_gbps * per_host * hosts_per_cluster / 8,
            "fabrics": [{"name": c["fabric"], "kind": "ib", "gbps": nic_gbps * per_host} for c in clusters],
            "clusters": clusters}
    return Cluster(topo, placement, [dev] * len(placement), {h: per_host for h in set(placement)})


def model(name: str) -> ModelSpec:
    return ModelSpec(**MODELS[name], bytes_per_param=2, act_bytes=2, optimizer_bytes=12, recompute="selective")
