"""Runs PyTorch's own distributed test suite against the uccl backend.

The suite ships in the torch wheel (torch/testing/_internal/distributed/distributed_test.py);
this is PyTorch's test/distributed/test_distributed_spawn.py with BACKEND=uccl: every test
spawns WORLD_SIZE ranks that call init_process_group(backend="uccl").

    python scripts/torch_dist_suite.py -k all_gather_coalesced -k any_source -k ddp_logging_data_cpu
    WORLD_SIZE=2 python scripts/torch_dist_suite.py -v -k test_send_recv

Needs the `expecttest` package (torch's test utilities import it). Not part of tests/: the
whole suite takes long and many of its tests are CUDA-only or gloo/nccl-specific; run the
tests you care about with -k (unittest's substring filter), or all of them with pytest:

    python -m pytest -q -rfEs --timeout 400 scripts/torch_dist_suite.py

The suite gates many tests on named backends (DistTestCases.backend_feature: which backends
do DDP, subgroups, GPUs). uccl claims the features it implements (UCCL_SUITE_FEATURES, default
below) so that those tests run against it instead of skipping; set UCCL_SUITE_FEATURES= (empty)
for the suite's own gating.

Some tests are gated on one backend's name alone (`BACKEND == "gloo"`, `BACKEND != "mpi"`:
CPU all_to_all, timeouts, get_future, batch_isend_irecv on CPU). UCCL_SUITE_AS=gloo (or mpi)
runs the suite under that name while every process group it asks for under that name is made
by uccl (init_process_group and distributed_c10d._new_process_group_helper are wrapped in every
rank): those tests then exercise uccl. Tests that build that backend's own classes directly (dist.ProcessGroupGloo(...))
still test that backend, and tests that compare dist.get_backend() with the name fail by
construction; read such a run's failures with that in mind. dist.monitored_barrier, which torch
refuses for any backend but Gloo by name, goes to uccl.torch.monitored_barrier there.

    UCCL_SUITE_AS=gloo python -m pytest -q -rfEs --timeout 400 scripts/torch_dist_suite.py
"""
import os
import tempfile

IMPERSONATED = os.environ.get("UCCL_SUITE_AS", "")
if IMPERSONATED:
    os.environ["BACKEND"] = IMPERSONATED
os.environ.setdefault("BACKEND", "uccl")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="uccl_torch_suite_"))

import uccl  # noqa: E402,F401  registers the backend before the suite reads BACKEND

import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if IMPERSONATED:
    _make_group = c10d._new_process_group_helper

    def _uccl_in_place_of(group_size, group_rank, global_ranks, backend, *args, **kwargs):
        if str(backend).lower() == IMPERSONATED:
            backend = "uccl"
        return _make_group(group_size, group_rank, global_ranks, backend, *args, **kwargs)

    c10d._new_process_group_helper = _uccl_in_place_of

    # MPI's init path differs before any group is made (ranks come from the MPI runtime): the
    # default group is asked for under uccl's name directly.
    _init = dist.init_process_group

    def _init_uccl_in_place_of(backend=None, *args, **kwargs):
        if backend is not None and str(backend).lower() == IMPERSONATED:
            backend = "uccl"
        return _init(backend, *args, **kwargs)

    dist.init_process_group = c10d.init_process_group = _init_uccl_in_place_of

    # torch's monitored_barrier refuses every backend but Gloo by name before asking the group;
    # uccl's groups have their own (uccl.torch.monitored_barrier), which the Gloo tests then check.
    import uccl.torch as _uccl_torch

    dist.monitored_barrier = c10d.monitored_barrier = _uccl_torch.monitored_barrier

# Features uccl implements, claimed before distributed_test.py's decorators read the sets:
# ddp (DistributedDataParallel and its comm hooks), subgroup (new_group / new_subgroups), gpu
# and cuda (CUDA tensors; the tests skip themselves where there are too few GPUs), plugin (a
# backend registered through dist.Backend.register_backend counts as available).
for feature in os.environ.get("UCCL_SUITE_FEATURES", "ddp,subgroup,gpu,cuda,plugin").split(","):
    if feature:
        DistTestCases.backend_feature.setdefault(feature, set()).add(os.environ["BACKEND"])

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
