"""The same uccl program under every launcher (README, "Launchers"): torchrun, mpirun, srun,
Ray (ray_hello.py) or plain environment variables. work(comm) is the program; uccl.init() finds
rank, size and the rendezvous in the launcher's environment."""
import numpy as np

import uccl


def work(comm):
    x = np.full(1000, comm.rank + 1, np.float32)
    comm.all_reduce(x)
    want = comm.size * (comm.size + 1) / 2
    ok = bool(np.all(x == want))
    print(f"HELLO rank {comm.rank}/{comm.size}: all_reduce {'ok' if ok else 'WRONG'} ({x[0]:g})", flush=True)
    return ok


if __name__ == "__main__":
    raise SystemExit(0 if work(uccl.init()) else 1)
