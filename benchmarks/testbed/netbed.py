"""Emulated multi-cluster network on one machine: network namespaces + iproute2 + tc.

Layout (C clusters x H hosts, each host a network namespace):

    host ns  <prefix>-c0h0   eth0 10.210.1.1/24 --veth--+
    host ns  <prefix>-c0h1   eth0 10.210.1.2/24 --veth--+-- br0 (10.210.1.254) --+
                                                                                 |  router ns
    host ns  <prefix>-c1h0   eth0 10.210.2.1/24 --veth--+-- br1 (10.210.2.254) --+  <prefix>-rt
    ...

* Inside a cluster hosts are bridged (br<c>, in the router namespace): the fast fabric.
  Every host link is shaped with tbf at `intra_gbit` in both directions (host eth0 egress,
  bridge port egress towards the host).
* Between clusters traffic is routed by the router namespace; what it routes into cluster c
  leaves through br<c>'s own egress, shaped at `inter_gbit`: the slow link between clusters.
  Bridged (intra-cluster) frames never pass that qdisc, so br<c>'s TX byte counter counts
  exactly the inter-cluster traffic into cluster c (plus a few ARP frames).

Only private addresses created here (10.210.x.y) are used, and routes cover only
10.210.0.0/16. Everything is torn down by Testbed.close() (context manager, atexit, SIGINT and
SIGTERM), including the processes started in the namespaces.
"""
import atexit
import json
import os
import signal
import subprocess

NET = "10.210"


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def topology_doc(clusters, hosts, intra_gbit, inter_gbit, host_gbps=None):
    """The UCCL_TOPO_FILE document of a bed of this shape (hosts named c<c>h<h>, matched by name or
    by their address); benchmarks/testbed/model.py predicts with it too."""
    doc = {"inter_cluster_gbps": inter_gbit, "clusters": []}
    if host_gbps:
        doc["host_gbps"] = host_gbps
    for c in range(clusters):
        doc["clusters"].append({
            "name": f"c{c}", "fabric": f"c{c}-fabric", "nic_gbps": intra_gbit, "uplink_gbps": inter_gbit,
            "hosts": [{"name": f"c{c}h{h}", "addresses": [Testbed.host_addr(c, h)],
                       "nics": [{"name": "eth0", "kind": "tcp", "fabric": f"c{c}-fabric", "gbps": intra_gbit}]}
                      for h in range(hosts)]})
    return doc


def netns_available():
    """True when this process may create network namespaces (root + iproute2)."""
    name = f"utbprobe{os.getpid()}"
    try:
        r = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    except FileNotFoundError:
        return False
    if r.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return True


def _tbf(ns, dev, gbit, queue_ms=20):
    # burst: enough for one timer tick at the rate (tbf drops to the rate only beyond it);
    # latency bounds the queue so that a slow link does not buffer seconds of data.
    burst = max(64 * 1024, int(gbit * 1e9 / 8 / 250))
    sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{gbit}gbit",
       "burst", str(burst), "latency", f"{queue_ms}ms")


class Testbed:
    def __init__(self, clusters=2, hosts=2, intra_gbit=4.0, inter_gbit=0.5, prefix=None, queue_ms=200, rails=1,
                 rail_gbit=None):
        # rails > 1: every host gets eth1.. as well, rail r on its own bridge per cluster
        # (rb<c>r<r>) and subnet 10.(210+r).<c+1>.<h+1>/24, shaped like eth0 (or at
        # rail_gbit[r - 1] Gbit/s: a rail slower than it reports, or busy), not routed between
        # clusters: separate network planes, one per rail.
        self.rails = rails
        self.rail_gbit = list(rail_gbit or [])
        self.clusters, self.hosts = clusters, hosts
        self.intra_gbit, self.inter_gbit = intra_gbit, inter_gbit
        self.queue_ms = queue_ms  # tbf queue bound: a deeper queue drops less under bursts
        self.prefix = prefix or f"utb{os.getpid() % 100000}"
        self.router = f"{self.prefix}-rt"
        self.procs = []
        self._up = False
        self._old_handlers = {}

    # -- names and addresses ---------------------------------------------------------------
    def host_ns(self, c, h):
        return f"{self.prefix}-c{c}h{h}"

    @staticmethod
    def host_addr(c, h, rail=0):
        net = NET if rail == 0 else f"10.{210 + rail}"
        return f"{net}.{c + 1}.{h + 1}"

    def all_hosts(self):
        return [(c, h) for c in range(self.clusters) for h in range(self.hosts)]

    def namespaces(self):
        return [self.router] + [self.host_ns(c, h) for c, h in self.all_hosts()]

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self):
        self.up()
        return self

    def __exit__(self, *exc):
        self.close()

    def up(self):
        self._install_cleanup()
        self._delete_namespaces()  # leftovers of a crashed run with the same prefix
        self._up = True
        r = self.router
        sh("ip", "netns", "add", r)
        sh("ip", "-n", r, "link", "set", "lo", "up")
        sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for c in range(self.clusters):
            br = f"br{c}"
            sh("ip", "-n", r, "link", "add", br, "type", "bridge")
            sh("ip", "-n", r, "addr", "add", f"{NET}.{c + 1}.254/24", "dev", br)
            sh("ip", "-n", r, "link", "set", br, "up")
            _tbf(r, br, self.inter_gbit, self.queue_ms)  # routed traffic into cluster c
        for c, h in self.all_hosts():
            ns, port = self.host_ns(c, h), f"c{c}h{h}"
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", r)
            sh("ip", "-n", ns, "addr", "add", f"{self.host_addr(c, h)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "route", "add", f"{NET}.0.0/16", "via", f"{NET}.{c + 1}.254")
            sh("ip", "-n", r, "link", "set", port, "master", f"br{c}")
            sh("ip", "-n", r, "link", "set", port, "up")
            _tbf(ns, "eth0", self.intra_gbit, self.queue_ms)
            _tbf(r, port, self.intra_gbit, self.queue_ms)
        for rail in range(1, self.rails):
            for c in range(self.clusters):
                sh("ip", "-n", r, "link", "add", f"rb{c}r{rail}", "type", "bridge")
                sh("ip", "-n", r, "link", "set", f"rb{c}r{rail}", "up")
            for c, h in self.all_hosts():
                ns, port, dev = self.host_ns(c, h), f"c{c}h{h}r{rail}", f"eth{rail}"
                sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", r)
                sh("ip", "-n", ns, "addr", "add", f"{self.host_addr(c, h, rail)}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
                sh("ip", "-n", r, "link", "set", port, "master", f"rb{c}r{rail}")
                sh("ip", "-n", r, "link", "set", port, "up")
                gbit = self.rail_gbit[rail - 1] if rail - 1 < len(self.rail_gbit) else self.intra_gbit
                _tbf(ns, dev, gbit, self.queue_ms)
                _tbf(r, port, gbit, self.queue_ms)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # our own process groups only
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        if self._up:
            self._delete_namespaces()
            self._up = False
        self._restore_handlers()

    def _delete_namespaces(self):
        existing = set(sh("ip", "netns", "list", check=False).split())
        for ns in self.namespaces():
            if ns in existing:
                sh("ip", "netns", "del", ns, check=False)

    def _install_cleanup(self):
        atexit.register(self.close)

        def handler(signum, frame):
            self.close()
            raise KeyboardInterrupt if signum == signal.SIGINT else SystemExit(128 + signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass

    def _restore_handlers(self):
        for sig, h in self._old_handlers.items():
            try:
                signal.signal(sig, h)
            except ValueError:
                pass
        self._old_handlers = {}

    def blackhole(self, src, dst, rail):
        """Packets from host src=(c, h) to host dst's address on `rail` go nowhere (a permanent
        neighbour entry with a MAC nobody has): a connect there times out, as to a dead link."""
        sh("ip", "-n", self.host_ns(*src), "neigh", "replace", self.host_addr(*dst, rail), "lladdr",
           "02:00:00:00:00:99", "dev", f"eth{rail}", "nud", "permanent")

    def lossy(self, percent, hosts=None, syn_only=False):
        """Every host (or those listed) drops `percent` % of the packets that reach it on eth0, at
        random (100: the link is down; 0: healed): a lossy link both ways (nftables numgen; this kernel has no netem). Dropped on
        the way in, not out: a packet dropped by the sender's own output hook fails its send
        (EPERM), and TCP treats that unlike a loss on the wire (a SYN-ACK retransmission that
        fails drops the half-open connection, and the next ACK meets a reset). syn_only: only
        connection requests (pure SYNs) are dropped; connections made before work on."""
        for c, h in hosts or self.all_hosts():
            ns = self.host_ns(c, h)
            sh("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "lossy", check=False)
            if percent <= 0:
                continue
            sh("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "lossy")
            sh("ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "lossy", "in",
               "{ type filter hook input priority 0; }")
            which = ["numgen", "random", "mod", "100", "<", str(int(percent))] if percent < 100 else []
            if syn_only:
                which = ["tcp", "flags", "&", "(syn|ack)", "==", "syn", *which]
            sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "lossy", "in", "iifname", "eth0", *which, "drop")

    # -- running things ----------------------------------------------------------------------
    def popen(self, c, h, argv, env, **kw):
        """Starts argv in host (c, h)'s namespace, in its own process group."""
        p = subprocess.Popen(["ip", "netns", "exec", self.host_ns(c, h), *argv], env=env, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def link_bytes(self):
        """TX bytes of every shaped link: {'inter:c': into cluster c, 'host:c,h': host egress}."""
        out = {}
        for c in range(self.clusters):
            out[f"inter:{c}"] = self._tx(self.router, f"br{c}")
        for c, h in self.all_hosts():
            out[f"host:{c},{h}"] = self._tx(self.host_ns(c, h), "eth0")
        return out

    def drops(self):
        """Packets dropped by the inter-cluster qdiscs (tbf tail drops)."""
        total = 0
        for c in range(self.clusters):
            j = json.loads(sh("ip", "netns", "exec", self.router, "tc", "-s", "-j", "qdisc", "show", "dev", f"br{c}"))
            total += sum(q.get("drops", 0) for q in j)
        return total

    @staticmethod
    def _tx(ns, dev):
        j = json.loads(sh("ip", "-n", ns, "-s", "-j", "link", "show", dev))
        return int(j[0]["stats64"]["tx"]["bytes"])

    def topology_file(self, path, ranks_per_host, host_gbps=None):
        """Writes the UCCL_TOPO_FILE describing this bed (clusters, hosts by address, rates)."""
        doc = topology_doc(self.clusters, self.hosts, self.intra_gbit, self.inter_gbit, host_gbps)
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        return path
