"""Scenario bodies for tests/test_security.py (run in every rank by tests/harness.py)."""
import json
import os
import subprocess
import sys

import numpy as np

KEY = "test-job-key-0123456789abcdef"

# A process of someone who is not part of the job (no UCCL_JOB_KEY, or another one): it tries
# the store port with raw requests and with uccl.TcpStore, and a rank's listening port with a
# hello; it reports everything it got back.
STRANGER = r'''
import json, socket, struct, sys
port, addr = int(sys.argv[1]), sys.argv[2]
out = {}

def drain(s, limit=5.0):
    s.settimeout(limit)
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    return data

def request(op, strings, arg=1000):
    body = b"".join(struct.pack("<I", len(x)) + x for x in strings)
    return struct.pack("<IB3xqII", 0x54534355, op, arg, len(strings), 0) + body

s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(request(2, [b"uccl/secret"]))                 # GET the job secret
out["get"] = drain(s).hex()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(request(1, [b"stranger/was-here", b"1"]))     # SET
out["set"] = drain(s).hex()
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.sendall(request(4, [b"uccl/peer/1"], 5))             # ADD
out["add"] = drain(s).hex()

import uccl
try:
    st = uccl.TcpStore("127.0.0.1", port, timeout=5)
    out["tcpstore"] = "served: " + repr(st.get("uccl/secret", 1))
except uccl.AuthenticationError as e:
    out["tcpstore"] = "AuthenticationError: " + str(e)
except Exception as e:
    out["tcpstore"] = type(e).__name__ + ": " + str(e)

host, p = addr.rsplit(":", 1)
r = socket.create_connection((host.strip("[]"), int(p)), timeout=5)
r.settimeout(5)
greeting = r.recv(40)
# A hello as a keyless rank would send it, then a MAC that cannot be right.
# (core/handshake.h HelloHeader, protocol version 2: ... offer_bytes, staging_chunk)
hello = struct.pack("<IHBB16sQiiIIIQ", 0x4C434355, 2, 0, 0, b"\x11" * 16, 0, 0, 1, 0, 1, 4, 0)
r.sendall(hello + b"\x00" * 32 + b"tcp1")
out["rank_greeting"] = greeting.hex()
out["rank_after"] = drain(r).hex()
print(json.dumps(out))
'''


def _listen_address(comm):
    return comm.describe().split("listening on ")[1].split("\n")[0].split()[0]


def _exact_collectives(ctx, rounds=2):
    import uccl  # noqa: F401
    comm, w = ctx.comm, ctx.world
    for n in (1, 7, 1023, (1 << 20) + 3):
        x = np.arange(n, dtype=np.float32) + ctx.rank
        comm.all_reduce(x)
        ctx.check.equal(x, np.arange(n, dtype=np.float32) * w + sum(range(w)), f"all_reduce {n}")
        g = comm.all_gather(np.full(n % 5 + 1, ctx.rank, np.int64))
        ctx.check.equal(np.asarray(g).reshape(-1), np.repeat(np.arange(w, dtype=np.int64), n % 5 + 1),
                        f"all_gather {n}")


def stranger(ctx):
    """Keyed job; a stranger process probes the store and rank 1's port; the job goes on."""
    _exact_collectives(ctx)
    if ctx.rank == 1:
        ctx.store.set("test/listen1", _listen_address(ctx.comm))
    result = None
    if ctx.rank == 0:
        addr = ctx.store.get("test/listen1", 30).decode()
        outs = {}
        for name, key in (("none", None), ("wrong", "another-key-0123456789abcdef")):
            env = {k: v for k, v in os.environ.items() if not k.startswith("UCCL_JOB_KEY")}
            if key:
                env["UCCL_JOB_KEY"] = key
            p = subprocess.run([sys.executable, "-c", STRANGER, str(ctx.port), addr], env=env,
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            outs[name] = json.loads(p.stdout.strip().splitlines()[-1])
        # Nothing the stranger wrote is in the store.
        import uccl
        try:
            ctx.store.get("stranger/was-here", 0.2)
            outs["written"] = True
        except uccl.TimeoutError:
            outs["written"] = False
        result = outs
    ctx.comm.barrier()
    _exact_collectives(ctx)  # the job is unharmed
    return {"stranger": result, "describe": ctx.comm.describe()}


def describe_after_collectives(ctx):
    _exact_collectives(ctx, rounds=1)
    return ctx.comm.describe()


def wrong_key_torch_store(ctx):
    """Ranks with different keys over torch's (unauthenticated) store: the data connection is refused."""
    import datetime

    import torch.distributed as dist

    import uccl
    store = dist.TCPStore("127.0.0.1", ctx.port, 2, ctx.rank == 0, timeout=datetime.timedelta(seconds=30))
    comm = uccl.Communicator(ctx.rank, 2, store, transport="tcp", timeout=8)
    x = np.ones(16, np.float32)
    try:
        comm.all_reduce(x)
        return "completed"
    except uccl.UcclError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        ctx.linger = False


def torch_backend_keyed(ctx):
    """init_process_group(backend="uccl") over torch's store, with a job key and TLS everywhere."""
    import datetime

    import torch
    import torch.distributed as dist

    import uccl  # noqa: F401  (registers the backend)
    dist.init_process_group("uccl", init_method=f"tcp://127.0.0.1:{ctx.port}", rank=ctx.rank,
                            world_size=ctx.world, timeout=datetime.timedelta(seconds=60))
    for n in (3, 1 << 18):
        t = torch.arange(n, dtype=torch.float32) + ctx.rank
        dist.all_reduce(t)
        want = torch.arange(n, dtype=torch.float32) * ctx.world + sum(range(ctx.world))
        ctx.check.true(torch.equal(t, want), f"torch all_reduce {n}")
    outs = [torch.zeros(5, dtype=torch.int64) for _ in range(ctx.world)]
    dist.all_gather(outs, torch.full((5,), ctx.rank, dtype=torch.int64))
    ctx.check.true(all(torch.equal(o, torch.full((5,), r, dtype=torch.int64)) for r, o in enumerate(outs)),
                   "torch all_gather")
    dist.barrier()
    dist.destroy_process_group()
    return True
