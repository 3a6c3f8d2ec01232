"""The built libraries keep any statically linked C++ runtime to themselves.

Why: a toolchain that links libstdc++ statically (the GPU machines' /opt/gcc) put libstdc++'s
code into libuccl.so and exported it. In a process that has its own libstdc++ (Python's
extensions, torch), the two copies then each answered part of the calls and disagreed on the
ids of locale facets: `std::ifstream >> long` in TcpStore's socket set-up took a wrong facet,
and every rank died with SIGSEGV (benchmarks/results/gpu_h200_20261127). The build links shared
objects with --exclude-libs,ALL (CMakeLists.txt); this test reads each library's dynamic symbol
table and fails if it defines libstdc++'s locale machinery, which only a static copy would.
"""
import glob
import os
import shutil
import subprocess

import pytest

import uccl._core

LIB_DIR = os.path.dirname(uccl._core.__file__)
# std::locale and the facets' ids: defined only by libstdc++ itself.
STATIC_RUNTIME_PREFIXES = ("_ZNSt6locale", "_ZNSt7codecvt", "_ZNKSt7codecvt", "_ZNSt7num_get")


def _defined_dynamic_symbols(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def _libraries():
    return sorted(glob.glob(os.path.join(LIB_DIR, "*.so")))


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_no_library_exports_a_static_cpp_runtime():
    libs = _libraries()
    assert any(os.path.basename(p).startswith("_core") for p in libs), f"no _core module among {libs}"
    assert any(os.path.basename(p) == "libuccl.so" for p in libs), f"no libuccl.so among {libs}"
    bad = {}
    for path in libs:
        found = [s for s in _defined_dynamic_symbols(path) if s.startswith(STATIC_RUNTIME_PREFIXES)]
        if found:
            bad[os.path.basename(path)] = found[:3]
    assert not bad, f"libraries export libstdc++'s own symbols (a static copy, linked without --exclude-libs): {bad}"
