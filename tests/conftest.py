"""Test session set-up.

* The tests exercise the INSTALLED uccl (pip install --no-build-isolation .). Run from the
  repository root, `python -m pytest` puts the root on sys.path, where ./uccl is the source
  tree without the compiled _core: drop that entry so `import uccl` finds the installed
  package (the spawned ranks inherit this sys.path).
* UCCL_* variables from the caller's shell would change what the scenarios test (a stray
  UCCL_TRANSPORT=tcp turns every shm scenario into a tcp one): they are removed, except the
  logging ones and UCCL_TIMING_TESTS (the opt-in for timed measurements). Scenarios set what they
  need per rank.
"""
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

if not glob.glob(os.path.join(ROOT, "uccl", "_core*.so")):
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != ROOT]
if HERE not in sys.path:
    sys.path.insert(0, HERE)
for _k in list(os.environ):
    if _k.startswith("UCCL_") and _k not in ("UCCL_DEBUG", "UCCL_DEBUG_FILE", "UCCL_TIMING_TESTS"):
        del os.environ[_k]


def pytest_report_header(config):
    import uccl
    info = uccl.build_info()
    built = ", ".join(k for k in ("verbs", "cuda", "torch") if info.get(k)) or "core only"
    return f"uccl {uccl.__version__} from {os.path.dirname(uccl.__file__)} ({info['build_type']}; {built})"
