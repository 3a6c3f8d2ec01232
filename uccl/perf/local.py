"""uccl-perf -N: start N ranks on this host for a quick look, without a launcher.

Each rank is `python -m uccl.perf` with the same arguments (minus -N) and the plain
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT environment that uccl.init() understands. Rank 0's
output is the report; the others print nothing. If a rank fails, the rest are stopped (a rank
waiting for a dead peer would otherwise sit until its timeout) and its exit code is returned.
"""
import os
import socket
import subprocess
import sys
import time


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _strip_n(argv):
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in ("-N", "--nranks"):
            skip = True
            continue
        if a.startswith("--nranks=") or (a.startswith("-N") and len(a) > 2):
            continue
        out.append(a)
    return out


def launch(n, argv):
    port = _free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                  "SLURM_NTASKS", "TORCHELASTIC_USE_AGENT_STORE"):
            env.pop(k, None)
        procs.append(subprocess.Popen([sys.executable, "-m", "uccl.perf"] + _strip_n(argv), env=env,
                                      stdout=None if r == 0 else subprocess.DEVNULL))
    rc = 0
    try:
        while procs:
            for p in list(procs):
                code = p.poll()
                if code is None:
                    continue
                procs.remove(p)
                if code != 0 and rc == 0:
                    rc = code
                    for q in procs:
                        q.terminate()
            time.sleep(0.05)
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        rc = 130
    return rc
