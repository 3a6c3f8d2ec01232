"""uccl as Ray's collective backend "uccl" and as a compiled-graph communicator, on a local Ray
cluster (one per module; 4 actors with num_cpus=0 so a 2-core machine can hold them)."""
import os
import shutil

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.util.collective.backend_registry")

import ray_workers as rw  # noqa: E402  (tests/ is on sys.path: conftest.py)

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4
GET_TIMEOUT = 240  # seconds; every ray.get has one, so nothing waits forever


@pytest.fixture(scope="module")
def cluster():
    temp = f"/tmp/ray_embed_{os.getpid()}"
    env = {"PYTHONPATH": os.pathsep.join([HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
           "UCCL_TIMEOUT_S": "60"}
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=temp, log_to_driver=False,
             runtime_env={"env_vars": env})
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def actors(cluster):
    group = [rw.Worker.remote(r) for r in range(WORLD)]
    yield group
    for a in group:
        ray.kill(a, no_restart=True)


def get(refs):
    return ray.get(refs, timeout=GET_TIMEOUT)


def expected(world):
    d = [rw.data(r) for r in range(world)]
    e = {f"allreduce_{name}": fn(np.stack(d), axis=0) for name, (fn, _) in rw.OPS.items()}
    e["reduce@1"] = np.max(np.stack(d), axis=0)
    e["broadcast"] = d[2]
    e["allgather"] = np.stack([x.reshape(2, 5) for x in d])
    e["reducescatter"] = [sum(rw.data(r, salt=i) for r in range(world)) for i in range(world)]
    e["recv"] = [d[(r - 1) % world] for r in range(world)]
    return e, d


def check_every_collective(results, world):
    e, d = expected(world)
    for rank, out in enumerate(results):
        for name in rw.OPS:
            np.testing.assert_array_equal(out[f"allreduce_{name}"], e[f"allreduce_{name}"], err_msg=f"rank {rank} {name}")
        np.testing.assert_array_equal(out["reduce"], e["reduce@1"] if rank == 1 else d[rank], err_msg=f"rank {rank}")
        np.testing.assert_array_equal(out["broadcast"], e["broadcast"])
        np.testing.assert_array_equal(out["allgather"], e["allgather"])
        np.testing.assert_array_equal(out["reducescatter"], e["reducescatter"][rank])
        np.testing.assert_array_equal(out["recv"], e["recv"][rank])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("torch_tensors", [False, True], ids=["numpy", "torch"])
def test_every_collective_against_numpy(actors, torch_tensors):
    """create_collective_group on the driver; the group is built lazily in each actor."""
    if torch_tensors:
        pytest.importorskip("torch")
    import uccl.ray  # noqa: F401
    from ray.util import collective as col
    name = f"all-{int(torch_tensors)}"
    col.create_collective_group(actors, WORLD, list(range(WORLD)), backend="uccl", group_name=name)
    check_every_collective(get([a.call.remote(rw.every_collective, name, torch_tensors) for a in actors]), WORLD)


@pytest.mark.timeout(600)
def test_two_groups_at_once(actors):
    """init_collective_group in the actors: the world and a pair of halves used concurrently."""
    get([a.init_group.remote(WORLD, r, "world") for r, a in enumerate(actors)])
    assert get([a.init_group.remote(2, r % 2, f"half{r // 2}") for r, a in enumerate(actors)]) == [0, 1, 0, 1]
    world = [a.call.remote(rw.all_reduce_loop, "world", 20, 0) for a in actors]
    halves = [a.call.remote(rw.all_reduce_loop, f"half{r // 2}", 20, 7) for r, a in enumerate(actors)]
    for x in get(world):
        np.testing.assert_array_equal(x, sum(rw.data(r, 1000) for r in range(WORLD)))
    for r, x in enumerate(get(halves)):
        pair = [r // 2 * 2, r // 2 * 2 + 1]
        np.testing.assert_array_equal(x, sum(rw.data(p % 2, 1000, salt=7) for p in pair))


@pytest.mark.timeout(600)
def test_actor_killed_mid_collective(actors):
    """Rank 3 dies while ranks 0-2 are inside an allreduce: each gets uccl.RemoteError whose
    message names rank 3 (e.peer is the rank that noticed first, rank 3 or a survivor that
    forwarded the root cause, as in test_peer_failures.py), and nothing hangs."""
    get([a.init_group.remote(WORLD, r, "dies") for r, a in enumerate(actors)])
    get([a.call.remote(rw.all_reduce_loop, "dies", 1, 0) for a in actors])   # all connected
    pending = [a.call.remote(rw.all_reduce_caught, "dies") for a in actors[:3]]
    actors[3].call.remote(rw.sleep_forever)
    ready, _ = ray.wait(pending, timeout=1.0, num_returns=3)
    assert not ready, "the allreduce finished without rank 3"
    ray.kill(actors[3], no_restart=True)
    for r, res in enumerate(get(pending)):
        assert res["type"] == "RemoteError", (r, res)
        assert res["peer"] is not None, (r, res)
        assert "rank 3" in res["message"], (r, res)


@pytest.mark.timeout(600)
def test_bad_arguments_are_uccl_errors(actors):
    get([a.init_group.remote(WORLD, r, "bad") for r, a in enumerate(actors)])

    def wrong_world(actor):
        import uccl
        from ray.util import collective as col
        try:
            col.allgather([np.zeros(4, np.float32)] * 3, np.zeros(4, np.float32), group_name="bad")
        except uccl.InvalidArgument as e:
            return str(e)

    # ray.util.collective checks the list length first (RuntimeError); uccl checks what Ray does not.
    def wrong_shapes(actor):
        import uccl
        from ray.util import collective as col
        try:
            col.reducescatter(np.zeros(4, np.float32), [np.zeros(5, np.float32)] * WORLD, group_name="bad")
        except uccl.InvalidArgument as e:
            return str(e)

    msgs = get([a.call.remote(wrong_shapes) for a in actors])
    assert all(m and "shape" in m for m in msgs), msgs
    with pytest.raises(ray.exceptions.RayTaskError, match="must be equal to world_size"):
        get(actors[0].call.remote(wrong_world))


@pytest.mark.timeout(600)
def test_compiled_graph_collectives_over_uccl(cluster):
    """allreduce / allgather / reducescatter nodes of a compiled graph run on UcclCommunicator."""
    torch = pytest.importorskip("torch")
    from ray.dag import InputNode, MultiOutputNode
    from ray.experimental.collective import allgather, allreduce, reducescatter
    from ray.experimental.util.types import ReduceOp

    from uccl.ray import UcclCommunicator
    actors = [rw.GraphWorker.remote(r) for r in range(WORLD)]
    try:
        comm = UcclCommunicator(actors)
        with InputNode() as inp:
            made = [a.make.bind(inp) for a in actors]
            summed = allreduce.bind(made, transport=comm)
            maxed = allreduce.bind([a.make.bind(inp) for a in actors], op=ReduceOp.MAX, transport=comm)
            gathered = allgather.bind([a.make.bind(inp) for a in actors], transport=comm)
            scattered = reducescatter.bind([a.make.bind(inp) for a in actors], transport=comm)
            dag = MultiOutputNode(summed + maxed + gathered + scattered)
        compiled = dag.experimental_compile()
        try:
            n = 8
            d = np.stack([rw.data(r, n) for r in range(WORLD)])
            for _ in range(3):
                out = [t.numpy() if isinstance(t, torch.Tensor) else t for t in ray.get(compiled.execute(n), timeout=GET_TIMEOUT)]
                for r in range(WORLD):
                    np.testing.assert_array_equal(out[r], d.sum(0))
                    np.testing.assert_array_equal(out[WORLD + r], d.max(0))
                    np.testing.assert_array_equal(out[2 * WORLD + r], d.reshape(-1))
                    np.testing.assert_array_equal(out[3 * WORLD + r], d.sum(0)[r * n // WORLD:(r + 1) * n // WORLD])
        finally:
            compiled.teardown()
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)


@pytest.mark.timeout(600)
def test_compiled_graph_communicator_send_recv(cluster):
    """UcclCommunicator.send/recv (what an accelerator graph calls), driven directly in actors."""
    pytest.importorskip("torch")
    from uccl.ray import UcclCommunicator
    actors = [rw.GraphWorker.remote(r) for r in range(2)]
    try:
        comm = UcclCommunicator(actors)

        def body(actor, comm, rank):
            import torch
            comm.initialize(rank)
            if rank == 0:
                comm.send(torch.arange(6, dtype=torch.float64).reshape(2, 3), 1)
                return None
            t = comm.recv((2, 3), torch.float64, 0)
            comm.destroy()
            return t.numpy()

        out = get([a.__ray_call__.remote(body, comm, r) for r, a in enumerate(actors)])
        np.testing.assert_array_equal(out[1], np.arange(6.0).reshape(2, 3))
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
