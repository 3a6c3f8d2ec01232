"""uccl.parallel.cpuquota: the CPU quotas that stand in for devices of different speed on the
testbed (cgroup v1 cpu controller). Argument errors everywhere; the caps where the controller
is writable (root, cgroup v1)."""
import os
import subprocess
import sys
import time

import pytest

from uccl.parallel import cpuquota
from uccl.parallel.cpuquota import CpuQuota


def test_bad_quotas_are_named():
    with pytest.raises(ValueError, match="positive"):
        CpuQuota("uccl-test-bad", 0)
    with pytest.raises(ValueError, match="cfs period"):
        CpuQuota("uccl-test-bad", 0.5, period_us=500)
    # 0.05 cores of a 10 ms period is 0.5 ms: below the kernel's 1 ms minimum
    with pytest.raises(ValueError, match="at least 1000 us"):
        CpuQuota("uccl-test-bad", 0.05, period_us=10_000)


@pytest.mark.skipif(not cpuquota.available(), reason="cgroup v1 cpu controller not writable here")
def test_a_child_group_caps_its_process():
    """A host group of 1 core with a child of 0.1 cores (10 ms period): a busy process moved
    into the child gets about 0.1 cores; the child is listed, inherits the period, and close()
    removes both groups."""
    name = f"uccl-test-{os.getpid()}"
    with CpuQuota(name, 1.0, period_us=10_000) as host:
        child = host.child("r0", 0.1)
        with open(os.path.join(child.path, "cpu.cfs_period_us")) as f:
            assert int(f.read()) == 10_000
        p = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass\n"
                              "import resource;print(resource.getrusage(resource.RUSAGE_SELF).ru_utime)"],
                             stdout=subprocess.PIPE, text=True)
        child.add(p.pid)
        assert p.pid in host.pids()
        t0 = time.monotonic()
        out, _ = p.communicate(timeout=30)
        wall = time.monotonic() - t0
        assert float(out) < 0.1 * wall * 2 + 0.15, (out, wall)  # uncapped it would use ~1.5 s of CPU
    assert not os.path.exists(host.path)
