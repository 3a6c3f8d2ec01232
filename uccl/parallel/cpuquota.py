"""CPU quotas (cgroup v1 cpu controller) that make ranks stand in for devices of different speed.

    with CpuQuota("trainer-fast", 0.5) as q:    # half a core for every process placed in it
        subprocess.Popen(q.wrap(["python", ...]))
`shares` (cpu.shares, default 1024) is the group's weight against everything else runnable: on
a machine busy with other work a higher weight lets the group actually get its quota (the
quota still caps it). The group lives under /sys/fs/cgroup/cpu/<name> (needs root); close() moves nothing back but
removes the group once its processes have exited. Names should carry the owner's name.
"""
from __future__ import annotations

import os
import shlex
import time

ROOT = "/sys/fs/cgroup/cpu"
PERIOD_US = 100_000  # the kernel's default CFS period


def available() -> bool:
    return os.path.isfile(os.path.join(ROOT, "cpu.cfs_quota_us")) and os.access(ROOT, os.W_OK)


class CpuQuota:
    def __init__(self, name: str, cores: float, shares: int = 0, period_us: int = PERIOD_US):
        """period_us: the CFS period. The group runs at full speed until it has used cores x period
        of CPU time, then waits for the next period: a long period makes a "slow device" that
        alternates between full speed and frozen (at 0.1 cores and 100 ms, 10 ms on, 90 ms off),
        a short one (a few ms) a device that is uniformly slower, as an accelerator is."""
        if cores <= 0:
            raise ValueError(f"cpu quota must be positive, got {cores}")
        if not 1000 <= period_us <= 1_000_000:
            raise ValueError(f"cfs period must be 1 ms .. 1 s, got {period_us} us")
        quota_us = int(cores * period_us)
        if quota_us < 1000:
            raise ValueError(f"quota of {cores} cores x {period_us} us period is {quota_us} us: "
                             "the kernel needs at least 1000 us per period (use a longer period)")
        if not available():
            raise OSError(f"cgroup v1 cpu controller not writable at {ROOT}")
        self.name, self.cores, self.period_us = name, cores, period_us
        self.children: list = []
        self.path = os.path.join(ROOT, name)
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
            f.write(str(period_us))
        with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(quota_us))
        if shares:  # weight against other runnable tasks: lets the group reach its quota on a busy machine
            with open(os.path.join(self.path, "cpu.shares"), "w") as f:
                f.write(str(int(shares)))

    def child(self, name: str, cores: float) -> "CpuQuota":
        """A group inside this one with its own quota (same period): the cgroup hierarchy caps a
        process in it by both. Used to give each process of a host its own speed."""
        c = CpuQuota(f"{self.name}/{name}", cores, period_us=self.period_us)
        self.children.append(c)
        return c

    def add(self, pid: int) -> None:
        """Moves process pid (all its threads) into the group; its future children inherit it."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    @staticmethod
    def gated(argv):
        """argv behind a gate: the shell waits for a line on stdin, then execs argv. Start it with
        stdin=PIPE, add() its pid, then write a newline (for launchers such as `ip netns exec`
        that hide /sys/fs/cgroup from the process itself)."""
        return ["sh", "-c", 'read _ && exec "$@"', "sh", *argv]

    def wrap(self, argv):
        """argv run inside the group (the shell joins it, then execs argv; children inherit)."""
        return ["sh", "-c", f"echo $$ > {shlex.quote(os.path.join(self.path, 'tasks'))} && exec "
                + " ".join(shlex.quote(a) for a in argv)]

    def pids(self):
        """The processes in this group and in its children."""
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                own = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            own = []
        return own + [pid for c in self.children for pid in c.pids()]

    def close(self, wait_s: float = 10.0, kill: bool = True) -> None:
        """Removes the group; kill: first SIGKILL what still runs in it (only processes that
        were placed there, and their children). Child groups are removed first."""
        for c in self.children:
            c.close(wait_s, kill)
        self.children = []
        if kill:
            import signal
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:  # still has tasks
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
