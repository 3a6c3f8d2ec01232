"""uccl.parallel on the emulated clusters: the Holmes pattern, two device speeds, and the
planner's predictions against measured runs. Writes JSON; uccl/parallel/RESULTS.md quotes it.

    sudo python benchmarks/testbed/run_trainer.py holmes   [--fast 1 --slow 0.1 ...]
    sudo python benchmarks/testbed/run_trainer.py hetero   [--quota-fast 0.3 --quota-slow 0.15]
    sudo python benchmarks/testbed/run_trainer.py validate [--plans 8]   # calibrates first (cached)
    sudo python benchmarks/testbed/run_trainer.py plan --plan 1,2,1 --steps 8 --repeat 3   # one plan (t,p,b)

2 clusters x 2 hosts x 2 ranks, torchrun per host (--nnodes 4). Each host's processes run in a
cgroup with a CPU quota of (ranks x per-rank cores): the quota is the "device speed" and also
keeps the measurement from depending on what else the (shared) machine runs, as long as the
machine has those cores to spare (--quota-per rank: each rank its own group of per-rank cores
inside it; --period-ms: the quota's CFS period). Configurations alternate within each round.
The planner's validation (uccl/parallel/RESULTS.md, section 3) runs with
`validate --quota-per rank --period-ms 10 [--repeat 2]`.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import launch  # noqa: E402
from netbed import Testbed  # noqa: E402

from uccl.parallel.cpuquota import CpuQuota  # noqa: E402

RPH = 2  # ranks per host
# cpu.shares of each host's group: on the shared 2-core machine (load 15-30 from other jobs) a
# default weight gets far less than the quota; the quota (at most 8 x 0.1 = 0.8 cores) still caps.
SHARES = 8192
# UCCL_SPIN_US for the ranks: a waiting uccl rank spins 5 ms (the library's default, for a rank
# that owns its core) before it sleeps. Under a CPU quota the spin is paid from the host's
# budget (0.2 cores = 20 ms per 100 ms period for its two ranks): every wait longer than the
# spin burns 5 ms of the "device's" compute, so a plan with many waits (pipeline bubbles, more
# micro-batches, TP operations) was measured up to 2x slower (uccl/parallel/RESULTS.md,
# "Why two plans were measured far slower"). An accelerator waiting for a message does not
# spend its compute, so the emulated devices do not spin: they sleep at once and are woken by
# the peer's write. --spin-us overrides (5000 reproduces the runs before 2026-11-25 11:00 UTC).
SPIN_US = 0
# The CFS period of each host's quota (--period-ms). The kernel's 100 ms makes a host at 0.2 cores
# run at full speed for 20 ms and then freeze for 80: a step of a few hundred ms spans a handful of
# periods, a message to a frozen host waits up to 80 ms, and a host that waited (pipeline bubble)
# starts with a whole period's budget. 100 reproduces the runs before 2026-11-26.
PERIOD_US = 100_000
# Whose quota (--quota-per): "host" (one group per host, ranks x per-rank cores, shared by its
# ranks: a rank runs up to twice as fast while its neighbour waits, which a model of per-device
# speeds cannot know) or "rank" (each rank its own group inside the host's, as an accelerator
# has its own speed). "host" reproduces the runs before 2026-11-26.
QUOTA_PER = "host"


def load1():
    return os.getloadavg()[0]


def run_bed(bed, args_, quotas, topo, hosts=None, timeout=900, port=29517, env_extra=None, sampler=None):
    """Runs `python -m uccl.parallel.train args_` with torchrun on the bed's hosts (or a subset),
    each host's processes under its CPU quota; returns rank 0's RESULT. sampler: a
    CgroupSampler that records the host groups' cpu.stat while the ranks run."""
    hosts = hosts or bed.all_hosts()
    master = bed.host_addr(*hosts[0])
    groups, procs, placer = [], [], None
    try:
        for node, (c, h) in enumerate(hosts):
            q = CpuQuota(f"trainer-{bed.prefix}-c{c}h{h}", quotas[(c, h)] * RPH, shares=SHARES,
                         period_us=PERIOD_US)
            groups.append(q)
            env = launch.base_env({**launch._host_env(bed, c, h, topo, False), "OMP_NUM_THREADS": "1",
                                   "UCCL_SPIN_US": str(SPIN_US), **(env_extra or {})})
            env.pop("RANK", None)
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(hosts)}",
                   f"--nproc-per-node={RPH}", f"--node-rank={node}", f"--master-addr={master}",
                   f"--master-port={port}", *args_]
            procs.append((f"node {node} (c{c}h{h})", start_in(bed, c, h, q, cmd, env)))
            if QUOTA_PER == "rank":
                for lr in range(RPH):
                    q.child(f"r{lr}", quotas[(c, h)])
        if QUOTA_PER == "rank":
            placer = RankPlacer(groups)
        if sampler is not None:
            sampler.start(groups)
        out = launch.wait(procs, timeout=timeout)
    finally:
        if placer is not None:
            placer.stop()
        if sampler is not None:
            sampler.stop()
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for q in groups:
            q.close()
    return out[0]


class RankPlacer:
    """--quota-per rank: moves each worker torchrun starts in a host's group into the child group
    of its LOCAL_RANK (q.children[local rank]), polling every 20 ms until every worker was
    placed. The workers cannot do it themselves (`ip netns exec` hides the cgroup file system);
    they import torch for seconds before their first collective, so they are placed long before
    any timed work."""

    def __init__(self, groups, every_s=0.02):
        import threading
        self.groups, self.every_s, self.placed = groups, every_s, set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @staticmethod
    def _local_rank(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for kv in f.read().split(b"\0"):
                    if kv.startswith(b"LOCAL_RANK="):
                        return int(kv[len("LOCAL_RANK="):])
        except (OSError, ValueError):
            pass
        return None

    def _loop(self):
        want = sum(len(q.children) for q in self.groups)
        while not self._stop.is_set() and len(self.placed) < want:
            for q in self.groups:
                try:
                    with open(os.path.join(q.path, "cgroup.procs")) as f:
                        pids = [int(x) for x in f.read().split()]
                except OSError:
                    continue
                for pid in pids:
                    lr = self._local_rank(pid)
                    if lr is not None and lr < len(q.children) and pid not in self.placed:
                        try:
                            q.children[lr].add(pid)
                            self.placed.add(pid)
                        except OSError:
                            pass  # exited meanwhile
            self._stop.wait(self.every_s)

    def stop(self):
        self._stop.set()
        self._thread.join()


class CgroupSampler:
    """Samples each host group's cpu.stat (nr_periods, nr_throttled, throttled_time ns) and the
    CPU time its threads ran (ns, /proc/<pid>/task/*/schedstat) every `every_s`, with the wall
    clock, while the ranks run: per-step throttling is the difference between the samples
    around a step (the ranks cannot read their cgroup: `ip netns exec` mounts a fresh /sys)."""

    def __init__(self, every_s=0.05):
        import threading
        self.every_s, self.samples, self._stop, self._thread = every_s, [], threading.Event(), None
        self.names = []

    @staticmethod
    def _read(q):
        st = {}
        try:
            with open(os.path.join(q.path, "cpu.stat")) as f:
                for line in f:
                    k, v = line.split()
                    st[k] = int(v)
        except OSError:
            return None
        run = 0
        for pid in q.pids():
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                        run += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # exited meanwhile
        st["run_ns"] = run
        return st

    def start(self, groups):
        import threading
        self.names = [q.name for q in groups]

        def loop():
            while not self._stop.is_set():
                self.samples.append((time.time(), [self._read(q) for q in groups]))
                self._stop.wait(self.every_s)
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def between(self, t0, t1):
        """Per group: the counters' increase from the last sample <= t0 to the first >= t1
        (run_ns is then an upper bound of the CPU the group's threads used in [t0, t1])."""
        a = [s for s in self.samples if s[0] <= t0]
        b = [s for s in self.samples if s[0] >= t1]
        if not a or not b:
            return None
        (ta, sa), (tb, sb) = a[-1], b[0]
        out = {"window_s": tb - ta}
        for name, x, y in zip(self.names, sa, sb):
            if x is None or y is None:
                continue
            out[name] = {k: y[k] - x.get(k, 0) for k in y}
        return out


def start_in(bed, c, h, quota, cmd, env):
    """Starts cmd in host (c, h)'s namespace inside the CPU quota group. `ip netns exec` mounts a
    fresh /sys, so the process cannot join the cgroup itself: it waits at a gate until its pid
    was moved from here (`ip netns exec` execs in place: the pid stays the same)."""
    import subprocess
    import tempfile
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    p = bed.popen(c, h, CpuQuota.gated(cmd), env, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
    p.out_file, p.err_file = out, err
    quota.add(p.pid)
    p.stdin.write("go\n")
    p.stdin.close()
    return p


def model_args(a):
    return ["--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads), "--seq", str(a.seq),
            "--vocab", str(a.vocab), "--micro-batch", str(a.micro_batch), "--micro-batches", str(a.micro_batches),
            "--steps", str(a.steps), "--warmup", "1", "--quiet"]


def bed_for(a, intra, inter, tag):
    bed = Testbed(clusters=2, hosts=2, intra_gbit=intra, inter_gbit=inter, prefix=f"trainer{tag}")
    bed.up()
    return bed, bed.topology_file(f"/tmp/trainer-{tag}-topo.json", ranks_per_host=RPH)


def holmes(a, rows):
    envs = {"all_fast": (a.fast, a.fast), "all_slow": (a.slow, a.slow), "mixed": (a.fast, a.slow)}
    runs = [("all_fast", "holmes"), ("all_slow", "holmes"), ("mixed", "holmes"), ("mixed", "naive")]
    for rnd in range(a.rounds):
        for env, layout in runs:
            bed, topo = bed_for(a, *envs[env], "h")
            try:
                quotas = {hc: a.quota_fast for hc in bed.all_hosts()}
                la = load1()
                r = run_bed(bed, ["-m", "uccl.parallel.train", "--pp", "2", "--tp", str(a.tp), "--layout", layout,
                                  *model_args(a)], quotas, topo)
            finally:
                bed.close()
            r.update(env=env, round=rnd, load1_before=la, load1_after=load1(), rates_gbit=envs[env])
            rows.append(r)
            print(f"[holmes] round {rnd} {env:8s} {layout:6s}: {r['tokens_per_s']:.0f} tok/s, step {r['step_s']:.3f}s "
                  f"comm {json.dumps({k: round(v, 3) for k, v in r['comm_s'].items()})} load {la:.1f}", flush=True)
    return rows


def hetero(a, rows):
    """c0 at quota_fast, c1 at quota_slow: each cluster alone, then both with adapt / uniform."""
    bed, topo = bed_for(a, a.fast, a.fast, "x")
    try:
        qf, qs = a.quota_fast, a.quota_slow
        both = {(c, h): (qf if c == 0 else qs) for c, h in bed.all_hosts()}
        cases = [("c0_alone", [(0, 0), (0, 1)], "adapt"), ("c1_alone", [(1, 0), (1, 1)], "adapt"),
                 ("both_adapt", None, "adapt"), ("both_uniform", None, "uniform")]
        for rnd in range(a.rounds):
            for name, hosts, parts in cases:
                la = load1()
                r = run_bed(bed, ["-m", "uccl.parallel.train", "--pp", "2", "--parts", parts, *model_args(a)],
                            both, topo, hosts=hosts)
                r.update(case=name, round=rnd, load1_before=la, load1_after=load1(), quotas=[qf, qs])
                rows.append(r)
                print(f"[hetero] round {rnd} {name:12s}: parts {r['parts']} {r['tokens_per_s']:.0f} tok/s "
                      f"step {r['step_s']:.3f}s load {la:.1f}", flush=True)
    finally:
        bed.close()
    return rows


def median_docs(docs):
    """One calibration document from several of the same spec: every number the median over them."""
    if len(docs) == 1:
        return docs[0]

    def merge(vals):
        if isinstance(vals[0], dict):
            return {k: merge([v[k] for v in vals]) for k in vals[0]}
        if isinstance(vals[0], (int, float)) and not isinstance(vals[0], bool):
            return statistics.median(vals)
        return vals[0]
    return merge(docs)


def calibrate_bed(a, bed, topo, cluster, model, quotas):
    """The planner's calibration measured on this bed under the quotas (uccl.planner.calibrate),
    cached in --cache-dir by what it was measured for; returns a Calibration."""
    import tempfile
    from uccl.planner import calibration as cb
    spec = cb.make_spec(cluster, model, a.max_micro_batch, reps=a.calib_reps, min_s=a.calib_min_s)
    key = {"method": 4, "spec": spec, "quotas": sorted(set(quotas.values())), "rates": [a.fast, a.slow], "shares": SHARES}
    if SPIN_US != 5000:  # the waiting policy changes what communication costs under a quota
        key["spin_us"] = SPIN_US
    if PERIOD_US != 100_000:
        key["period_us"] = PERIOD_US
    if QUOTA_PER != "host":
        key["quota_per"] = QUOTA_PER
    if a.calib_repeat > 1:
        key["calib_repeat"] = a.calib_repeat
    path = a.calibration or os.path.join(a.cache_dir, f"calibration-{cb.cache_key(key)}.json")
    if os.path.exists(path) and not a.recalibrate:
        print(f"[validate] calibration from {path}", flush=True)
        return cb.Calibration.load(path), path
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    la, t0 = load1(), time.time()
    try:  # --calib-repeat N: N launches, every figure the median over them (launches drift apart)
        docs = [run_bed(bed, ["-m", "uccl.planner.calibrate", "--spec", f.name], quotas, topo, port=29519)
                for _ in range(max(1, a.calib_repeat))]
    finally:
        os.unlink(f.name)
    doc = median_docs(docs)
    if len(docs) > 1:
        doc["launches"] = len(docs)
    # one share for every rank: the calibration scales to other shares by q0/q; measured under
    # several shares, each group was measured at its real ones: quota 0 (no scaling)
    doc.update(quota=(quotas and len(set(quotas.values())) == 1 and next(iter(quotas.values()))) or 0.0,
               measured_for=key, load1_before=la, load1_after=load1(),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    cal = cb.Calibration(doc)
    cal.save(path)
    print(f"[validate] calibrated in {time.time() - t0:.0f} s ({len(spec['partitions'])} group shapes, "
          f"load {la:.1f}): {path}", flush=True)
    return cal, path


def bed_cluster(a, topo):
    """The planner's view of the bed (every rank a 'cpu' device at --quota-fast) and the model."""
    from uccl.planner import spec
    with open(topo) as f:
        tdoc = json.load(f)
    doc = {"topology": tdoc, "devices": {"cpu": {"flops": 1e9, "memory_gib": 4, "cpu_quota": a.quota_fast}},
           "hosts": {"default": {"device": "cpu", "count": RPH}},
           "model": dict(layers=a.layers, hidden=a.hidden, heads=a.heads, seq=a.seq, vocab=a.vocab,
                         global_batch=a.global_batch, bucket_bytes=1 << 20)}
    return spec.cluster_from_dict(doc), spec.model_from_dict(doc["model"])


def calibrate(a, rows):
    """Only the calibration (at --quota-fast per rank), e.g. to check how its costs scale with
    the CPU share: `calibrate --quota-fast 0.05` against the 0.1 one."""
    bed, topo = bed_for(a, a.fast, a.slow, "v")
    try:
        cluster, model = bed_cluster(a, topo)
        cal, path = calibrate_bed(a, bed, topo, cluster, model, {hc: a.quota_fast for hc in bed.all_hosts()})
        rows.append({"calibration": path, "quota": a.quota_fast})
    finally:
        bed.close()
    return rows


def validate(a, rows):
    """Planner on this bed, then every plan it lists run on the bed. Default: compute and
    communication calibrated on the bed under the quota (calibrate_bed); --link-only: the
    device speed profiled under the quota and communication priced from the links' rates."""
    from uccl.planner.estimate import Comm, estimate
    from uccl.planner.search import describe_groups, plan_dict, search
    from uccl.planner import calibration as cb
    from uccl.planner.profile import profile_devices
    from uccl.planner.validate import trainer_args
    bed, topo = bed_for(a, a.fast, a.slow, "v")
    try:
        cluster, model = bed_cluster(a, topo)
        quotas = {hc: a.quota_fast for hc in bed.all_hosts()}
        link = Comm.from_uccl(cluster.topology())
        flops = profile_devices(cluster, model, period_us=PERIOD_US)
        for d in cluster.device_of_rank:
            d.flops = flops[d.name]
        cal_path = None
        if a.link_only:
            comm = link
        else:
            cal, cal_path = calibrate_bed(a, bed, topo, cluster, model, quotas)
            comm = cb.apply(cal, cluster, link)
        plans, stats = search(model, cluster, comm, top=a.plans, max_micro_batch=a.max_micro_batch)
        ds = []  # one row per plan, updated after each of its launches
        for rnd in range(a.repeat):  # --repeat: every plan launched again, interleaved with the others
            for i, (e, s) in enumerate(plans):
                if rnd == 0:
                    d = plan_dict(e, s, describe_groups(cluster, comm, model, s))
                    if not a.link_only:  # the old model's figure for the same plan (links + FLOP/s profile)
                        kinds = {id(k): k for k in cluster.device_of_rank}.values()
                        saved = [(k, k.timings) for k in kinds]
                        for k in kinds:
                            k.timings = None
                        d["predicted_link_only_s"] = estimate(model, cluster, link, s).time_s
                        for k, t in saved:
                            k.timings = t
                    d.update(rank_predicted=i + 1, measured_all=[], launches=[], device_flops=flops,
                             calibration=cal_path)
                    rows.append(d)
                    ds.append(d)
                d = ds[i]
                la = load1()
                r = run_bed(bed, trainer_args(d, model, a.steps, a.warmup), quotas, topo)
                d["launches"].append({"step_s": r["step_s"], "step_s_all": r["step_s_all"], "comm_s": r["comm_s"],
                                      "load1_before": la, "load1_after": load1()})
                # measured: the median step over every launch so far (steps of one launch agree
                # better than launches do: up to +-24% between launches of a plan on this machine)
                d["measured_all"] += r["step_s_all"]
                m = statistics.median(d["measured_all"])
                d.update(measured_s=m, error=d["predicted_s"] / m - 1, load1_before=la, load1_after=load1(),
                         comm_s=r["comm_s"])
                rows.save()
                print(f"[validate] #{i + 1} t={s.tp} p={s.pp} d={s.dp} b={s.micro_batch} {s.layout} parts={s.parts} "
                      f"order={s.order}: predicted {e.time_s:.3f}s measured {r['step_s']:.3f}s"
                      + (f" (launch {rnd + 1}/{a.repeat}; over launches {m:.3f}s)" if a.repeat > 1 else "")
                      + f" ({d['error'] * 100:+.1f}%) load {la:.1f}", flush=True)
    finally:
        bed.close()
    return rows


def one_plan(a, rows):
    """One plan (--plan t,p,b) run --repeat times on the validate bed (mixed environment, every
    rank at --quota-fast), without the planner: per step its time, the per-group communication
    and each host group's CPU throttling (CgroupSampler), to look into single plans."""
    from uccl.planner.validate import trainer_args
    t, p, b = (int(v) for v in a.plan.split(","))
    world = 4 * RPH
    d = world // (t * p)
    m = a.global_batch // (d * b)
    plan = {"tp": t, "pp": p, "layout": a.layout, "parts": a.parts.split(",") if a.parts else
            __import__("uccl.parallel.partition", fromlist=["uniform"]).uniform(a.layers, p),
            "order": list(range(p)), "micro_batch": b, "n_micro": m}
    env_extra = dict(kv.split("=", 1) for kv in a.env)
    bed, topo = bed_for(a, a.fast, a.slow, "v")
    try:
        _, model = bed_cluster(a, topo)
        quotas = {hc: a.quota_fast for hc in bed.all_hosts()}
        for rep in range(a.repeat):
            la = load1()
            smp = CgroupSampler()
            args_ = trainer_args(plan, model, a.steps, a.warmup)
            if a.trace:
                args_ += ["--trace", f"{a.trace}.{rep}.json"]
            r = run_bed(bed, args_, quotas, topo, env_extra=env_extra, sampler=smp)
            cg = [smp.between(*w) for w in r["wall_all"]]
            row = {"plan": plan, "dp": d, "repeat": rep, "env": env_extra, "load1_before": la, "load1_after": load1(),
                   "step_s": r["step_s"], "step_s_all": r["step_s_all"], "comm_s_all": r["comm_s_all"],
                   "cgroup_per_step": cg, "trace": r.get("trace")}
            rows.append(row)
            print(f"[plan] t={t} p={p} d={d} b={b} m={m} rep {rep} env {env_extra} load {la:.1f}: median "
                  f"{r['step_s']:.3f}s", flush=True)
            for i, (st, cm, c) in enumerate(zip(r["step_s_all"], r["comm_s_all"], cg)):
                thr = ""
                if c:
                    hosts = [v for k, v in c.items() if k != "window_s"]
                    thr = (f"| throttled {sum(h['nr_throttled'] for h in hosts)}/{sum(h['nr_periods'] for h in hosts)} "
                           f"periods {sum(h['throttled_time'] for h in hosts) / 1e9:.2f}s, cores used "
                           + " ".join(f"{h['run_ns'] / 1e9 / c['window_s']:.3f}" for h in hosts))
                print(f"    step {i}: {st:.3f}s comm " + " ".join(f"{k}={v:.3f}" for k, v in sorted(cm.items()))
                      + f" {thr}", flush=True)
    finally:
        bed.close()
    return rows


def main():
    global SPIN_US, PERIOD_US, QUOTA_PER
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("holmes", "hetero", "validate", "calibrate", "plan"))
    ap.add_argument("--fast", type=float, default=1.0, help="Gbit/s of a fast link")
    ap.add_argument("--slow", type=float, default=0.05, help="Gbit/s of a slow link")
    ap.add_argument("--quota-fast", type=float, default=0.1, help="cores per rank, fast devices")
    ap.add_argument("--quota-slow", type=float, default=0.05, help="cores per rank, slow devices")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=16, help="validate: the planner's global batch")
    ap.add_argument("--max-micro-batch", type=int, default=4)
    ap.add_argument("--plans", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed ones")
    ap.add_argument("--plan", default="1,2,1", help="plan: t,p,b (d = 8 / (t p), 1F1B, uniform parts)")
    ap.add_argument("--layout", default="holmes", help="plan: layout")
    ap.add_argument("--parts", default="", help="plan: layers per stage, e.g. 2,2 (default uniform)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="plan: runs of the plan; validate: launches of every plan (interleaved; median step over all)")
    ap.add_argument("--env", action="append", default=[], help="plan: KEY=VALUE for the ranks (repeatable)")
    ap.add_argument("--trace", default="", help="plan: Chrome trace of the first timed step, PATH.<rep>.json")
    ap.add_argument("--out", default="")
    ap.add_argument("--link-only", action="store_true",
                    help="validate: the old model (links' rates, FLOP/s profile), no calibration")
    ap.add_argument("--calibration", default="", help="validate: calibration file to use (measured if missing)")
    ap.add_argument("--recalibrate", action="store_true", help="validate: measure again even if cached")
    ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/uccl/planner"))
    ap.add_argument("--calib-reps", type=int, default=3, help="calibration: timed repetitions per size")
    ap.add_argument("--calib-repeat", type=int, default=1,
                    help="calibration: launches of the calibration run (each figure the median over them)")
    ap.add_argument("--calib-min-s", type=float, default=1.0, help="calibration: seconds per compute timing")
    ap.add_argument("--spin-us", type=int, default=SPIN_US,
                    help="UCCL_SPIN_US of the ranks (default 0: quota'd devices do not spin, see SPIN_US)")
    ap.add_argument("--quota-per", choices=("host", "rank"), default=QUOTA_PER,
                    help="one CPU quota per host (shared by its ranks) or per rank (see QUOTA_PER)")
    ap.add_argument("--period-ms", type=float, default=PERIOD_US / 1000,
                    help="CFS period of the hosts' CPU quotas (default 100, the kernel's; see PERIOD_US)")
    a = ap.parse_args()
    SPIN_US = a.spin_us
    PERIOD_US = int(a.period_ms * 1000)
    QUOTA_PER = a.quota_per
    t0 = time.time()
    out = a.out or os.path.join(HERE, f"trainer_{a.what}.json")
    rows = Rows(out, {"config": vars(a), "cpus": os.cpu_count()}, t0)
    {"holmes": holmes, "hetero": hetero, "validate": validate, "calibrate": calibrate, "plan": one_plan}[a.what](a, rows)
    print(f"wrote {out} ({time.time() - t0:.0f} s)")


class Rows(list):
    """The results so far, rewritten to the JSON file after every run (an interrupted
    measurement keeps what it measured)."""

    def __init__(self, path, head, t0):
        super().__init__()
        self.path, self.head, self.t0 = path, head, t0

    def append(self, row):
        super().append(row)
        self.save()

    def save(self):
        with open(self.path, "w") as f:
            json.dump({**self.head, "rows": list(self), "wall_s": time.time() - self.t0}, f, indent=1)


if __name__ == "__main__":
    main()
