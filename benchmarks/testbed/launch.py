"""Launching ranks on the emulated hosts of a Testbed: plain processes or torchrun.

Ranks are numbered host by host: rank = (c * hosts + h) * ranks_per_host + local_rank, which
is what torchrun's --node-rank ordering gives too. Each rank prints ``RESULT <json>`` lines;
run() returns them parsed, per rank, and raises with the ranks' stderr if any rank failed.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MASTER_PORT = 29517


def base_env(extra=None):
    env = dict(os.environ)
    # An in-tree build (uccl/_core*.so copied next to the package) wins over an installed one.
    if glob.glob(os.path.join(REPO, "uccl", "_core*.so")):
        env["PYTHONPATH"] = REPO + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # torch imports every installed "torch.backends" entry point; an installed uccl's may not
    # match the in-tree package, and the testbed does not need the autoload.
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    env.setdefault("UCCL_TIMEOUT_S", "120")
    env.update(extra or {})
    return env


def _host_env(bed, c, h, topo_file, cluster_labels):
    # TESTBED_*: for rank programs that read the bed's counters or need their cluster id.
    e = {"TESTBED_ROUTER": bed.router, "TESTBED_CLUSTERS": str(bed.clusters), "TESTBED_CLUSTER": str(c),
         "TESTBED_HOST": str(h)}
    if topo_file:
        e["UCCL_TOPO_FILE"] = topo_file
    if cluster_labels:
        e["UCCL_CLUSTER"] = f"c{c}"
    return e


def start(bed, ranks_per_host, argv, env=None, topo_file=None, cluster_labels=False, torchrun=False,
          master_port=MASTER_PORT, hosts=None):
    """Starts the ranks; returns [(description, Popen)]. hosts: subset [(c, h)] (default all)."""
    hosts = hosts or bed.all_hosts()
    nnodes = len(hosts)
    world = nnodes * ranks_per_host
    master = bed.host_addr(*hosts[0])
    procs = []
    for node, (c, h) in enumerate(hosts):
        henv = base_env({**(env or {}), **_host_env(bed, c, h, topo_file, cluster_labels)})
        if torchrun:
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
                   f"--nproc-per-node={ranks_per_host}", f"--node-rank={node}", f"--master-addr={master}",
                   f"--master-port={master_port}", *argv]
            henv.pop("RANK", None)
            procs.append((f"torchrun node {node} (c{c}h{h})", _popen(bed, c, h, cmd, henv)))
            continue
        for lr in range(ranks_per_host):
            renv = dict(henv, RANK=str(node * ranks_per_host + lr), WORLD_SIZE=str(world), LOCAL_RANK=str(lr),
                        LOCAL_WORLD_SIZE=str(ranks_per_host),
                        MASTER_ADDR=master, MASTER_PORT=str(master_port))
            procs.append((f"rank {node * ranks_per_host + lr} (c{c}h{h})", _popen(bed, c, h, [sys.executable, *argv], renv)))
    return procs


def _popen(bed, c, h, argv, env):
    # Output goes to files, not pipes: a rank blocked on a full pipe that nobody reads yet
    # (we wait for the ranks one after the other) would stall the collective for everyone.
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    p = bed.popen(c, h, argv, env, stdout=out, stderr=err)
    p.out_file, p.err_file = out, err
    return p


def _read(f):
    f.seek(0)
    text = f.read()
    f.close()
    return text


def wait(procs, timeout=600):
    """Waits for every process; returns the RESULT dicts. Raises (with stderr tails) on failure."""
    results, failures = [], []
    for desc, p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            failures.append(f"{desc}: timed out\n{_read(p.err_file)[-2000:]}")
            continue
        out, err = _read(p.out_file), _read(p.err_file)
        if p.returncode != 0:
            failures.append(f"{desc}: exit {p.returncode}\n{err[-3000:]}")
        # torchrun (like mpirun) forwards its ranks' output concurrently: two RESULT records
        # can share a line, so decode one JSON object after each marker instead of by lines.
        decoder = json.JSONDecoder()
        for part in out.split("RESULT ")[1:]:
            results.append(decoder.raw_decode(part)[0])
    if failures:
        raise RuntimeError("ranks failed:\n" + "\n".join(failures))
    return sorted(results, key=lambda r: r.get("rank", 0))


def run(bed, ranks_per_host, argv, timeout=600, **kw):
    return wait(start(bed, ranks_per_host, argv, **kw), timeout)
