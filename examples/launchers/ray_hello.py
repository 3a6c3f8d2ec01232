"""hello.py's work(comm) on Ray actors: the communicator comes from a ray.util.collective group
with backend "uccl" (rendezvous through Ray, nothing to set). python ray_hello.py [--actors 4]"""
import argparse
import os
import sys

import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@ray.remote(num_cpus=0)
class Rank:
    def run(self, world, rank):
        import contextlib
        import io

        import hello
        import uccl.ray
        from ray.util import collective as col
        col.init_collective_group(world, rank, backend="uccl", group_name="hello")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # shown by the driver, in rank order
            ok = hello.work(uccl.ray.group("hello"))
        return ok, out.getvalue()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--actors", type=int, default=4)
    n = ap.parse_args().actors
    here = os.path.dirname(os.path.abspath(__file__))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": here}})
    try:
        results = ray.get([Rank.remote().run.remote(n, r) for r in range(n)], timeout=300)
    finally:
        ray.shutdown()
    print("".join(text for _, text in results), end="")
    sys.exit(0 if all(ok for ok, _ in results) else 1)
