"""Runs PyTorch's own distributed test suite against the uccl backend.

The suite ships in the torch wheel (torch/testing/_internal/distributed/distributed_test.py);
this is PyTorch's test/distributed/test_distributed_spawn.py with BACKEND=uccl: every test
spawns WORLD_SIZE ranks that call init_process_group(backend="uccl").

    python scripts/torch_dist_suite.py -k all_gather_coalesced -k any_source -k ddp_logging_data_cpu
    WORLD_SIZE=2 python scripts/torch_dist_suite.py -v -k test_send_recv

Needs the `expecttest` package (torch's test utilities import it). Not part of tests/: the
whole suite takes long and many of its tests are CUDA-only or gloo/nccl-specific; run the
tests you care about with -k (unittest's substring filter).
"""
import os
import tempfile

os.environ.setdefault("BACKEND", "uccl")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="uccl_torch_suite_"))

import uccl  # noqa: E402,F401  registers the backend before the suite reads BACKEND

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
