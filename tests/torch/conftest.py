"""pytest setup for the torch.distributed backend tests.

Skips only on uccl.build_info()['torch'] (never by guessing). Before anything imports uccl or
torch, drops sys.path entries that would import the *source* uccl package (a checkout without
its compiled _core): torch imports uccl through its entry point, and spawned ranks inherit
sys.path, so a shadowing checkout would break every rank's `import torch`.
"""
import glob
import os
import sys

import pytest


def _is_unbuilt_checkout(entry: str) -> bool:
    d = os.path.abspath(entry or os.getcwd())
    pkg = os.path.join(d, "uccl")
    return os.path.isfile(os.path.join(pkg, "__init__.py")) and not glob.glob(os.path.join(pkg, "_core*.so"))


sys.path[:] = [p for p in sys.path if not _is_unbuilt_checkout(p)]

import uccl  # noqa: E402

HAVE_TORCH_BACKEND = bool(uccl.build_info().get("torch"))


def pytest_collection_modifyitems(config, items):
    if HAVE_TORCH_BACKEND:
        return
    skip = pytest.mark.skip(reason="uccl built without the torch backend (uccl.build_info()['torch'] is False)")
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
