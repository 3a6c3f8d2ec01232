"""torch.distributed backend "uccl": registration, options, and the process-group creator.

How registration happens (any one suffices; register() is idempotent):
  1. torch's own import runs every ``torch.backends`` entry point (pyproject.toml maps ``uccl``
     to ``uccl._torch_autoload:autoload``), so ``init_process_group(backend="uccl")`` works
     without ``import uccl``. torch does this after ``torch.distributed`` is imported
     (torch/__init__.py, ``_import_device_backends``); TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off.
  2. ``import uccl`` calls register(): at once if torch is already imported, otherwise it only
     arms a tiny import hook that registers right after torch.distributed loads. ``import uccl``
     therefore never pays for importing torch.
  3. Calling ``uccl._torch_backend.register()`` explicitly.

This module must import without torch: uccl/__init__.py imports it on every ``import uccl``.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from typing import Any, Optional, Union

BACKEND_NAME = "uccl"
_C10D_MODULE = "torch.distributed.distributed_c10d"

_lock = threading.RLock()
_registered = False


@dataclasses.dataclass
class ProcessGroupOptions:
    """Per-group options for the uccl backend (exported as ``uccl.ProcessGroupOptions``).

    Pass as ``pg_options`` to ``init_process_group`` / ``new_group``. ``None`` fields fall back
    to uccl's environment configuration (UCCL_TRANSPORT, UCCL_ALGO, UCCL_SOCKET_IFNAME).

    transport:     "auto", "tcp", "shm", ... (overrides UCCL_TRANSPORT for this group)
    algorithm:     "auto", "ring", "direct", ... (overrides UCCL_ALGO for this group)
    socket_ifname: network interface(s) for TCP (overrides UCCL_SOCKET_IFNAME)
    timeout:       seconds or timedelta; overrides init_process_group(timeout=) for this group
    """

    transport: Optional[str] = None
    algorithm: Optional[str] = None
    socket_ifname: Optional[str] = None
    timeout: Optional[Union[float, datetime.timedelta]] = None


def _seconds(t: Any) -> float:
    if t is None:
        return -1.0
    if isinstance(t, datetime.timedelta):
        return t.total_seconds()
    return float(t)


def _create_process_group(dist_backend_opts: Any, pg_options: Any) -> Any:
    """The creator torch calls for every group using "uccl" (extended_api=True)."""
    if pg_options is None:
        pg_options = ProcessGroupOptions()
    if not isinstance(pg_options, ProcessGroupOptions):
        raise TypeError(
            f"uccl: pg_options must be a uccl.ProcessGroupOptions, got {type(pg_options).__name__}"
        )
    try:
        from uccl import _torch as ext  # loads libtorch-linked code: only once a group is made
    except ImportError as e:
        raise ImportError(
            "uccl: the torch backend extension uccl._torch could not be loaded; uccl was built "
            "without torch support or against a different torch version (rebuild uccl with this "
            f"torch installed): {e}"
        ) from e
    _patch_ddp_logging_name()
    timeout = pg_options.timeout if pg_options.timeout is not None else dist_backend_opts.timeout
    return ext.ProcessGroupUCCL(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        timeout_s=_seconds(timeout),
        transport=pg_options.transport or "",
        algorithm=pg_options.algorithm or "",
        socket_ifname=pg_options.socket_ifname or "",
        name=str(dist_backend_opts.group_id or ""),
    )


_ddp_patched = False


def _patch_ddp_logging_name() -> None:
    """Makes DDP's logging data name the backend "uccl", as ``dist.get_backend()`` does.

    DDP records ``ProcessGroup::getBackendName()``, and for every out-of-tree backend torch's
    ProcessGroup answers "custom": c10d's BackendType enum has no entry for it, and the
    ProcessGroup object is torch's own, built before our creator runs, so the backend cannot
    override it. ``DistributedDataParallel._get_ddp_logging_data()`` (what tools and PyTorch's
    own tests read) is corrected instead, only for groups whose backend is uccl. What DDP's C++
    logger sends to c10d's usage log still says "custom".
    """
    global _ddp_patched
    with _lock:
        if _ddp_patched:
            return
        _ddp_patched = True
        try:
            from torch.nn.parallel import distributed as ddp_module
        except Exception:  # torch without nn.parallel: nothing to fix
            return
        cls = ddp_module.DistributedDataParallel
        original = cls._get_ddp_logging_data

        def _get_ddp_logging_data(self: Any) -> Any:
            data = original(self)
            if isinstance(data, dict) and data.get("backend_name") == "custom":
                try:
                    import torch.distributed as dist

                    name = dist.get_backend(self.process_group)
                except Exception:
                    return data
                if name == BACKEND_NAME:
                    data["backend_name"] = name
            return data

        _get_ddp_logging_data.__doc__ = original.__doc__
        _get_ddp_logging_data.__wrapped__ = original  # type: ignore[attr-defined]
        cls._get_ddp_logging_data = _get_ddp_logging_data


def _extension_built() -> bool:
    try:
        return importlib.util.find_spec("uccl._torch") is not None
    except (ImportError, ValueError):
        return False


class _DeviceTypes(list):
    """The device types "uccl" serves: cpu, cuda, and whatever ``torch.accelerator`` reports at
    the moment a group is made (xpu, mps, a PrivateUse1 device registered after ``import
    torch``...). Their tensors are staged through host memory with torch's own copies.

    torch reads ``Backend.backend_capability["uccl"]`` when it builds a group's device map, so a
    list that adds the current accelerator when read registers the backend for device types
    that did not exist yet when uccl registered itself (torch's entry-point autoload runs during
    ``import torch``, before any out-of-tree device can be set up)."""

    def _types(self) -> list:
        types = list(super().__iter__())
        try:
            import torch

            acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
        except Exception:  # no torch.accelerator in this torch, or its device module is broken
            acc = None
        if acc is not None and acc.type not in types:
            types.append(acc.type)
        return types

    def __iter__(self):  # type: ignore[override]
        return iter(self._types())

    def __contains__(self, item: object) -> bool:
        return item in self._types()

    def __len__(self) -> int:
        return len(self._types())

    def __repr__(self) -> str:
        return repr(self._types())


def _register_with(c10d: Any) -> bool:
    global _registered
    with _lock:
        if _registered:
            return True
        backend = c10d.Backend
        if BACKEND_NAME.upper() not in backend._plugins:
            backend.register_backend(
                BACKEND_NAME, _create_process_group, extended_api=True, devices=["cpu", "cuda"]
            )
            # Read when a group is made: the accelerator torch reports then joins the list.
            backend.backend_capability[BACKEND_NAME] = _DeviceTypes(
                backend.backend_capability[BACKEND_NAME]
            )
        _registered = True
        return True


def register() -> bool:
    """Registers "uccl" with torch.distributed. Idempotent and cheap; never imports torch.

    Returns True once registered, False when it cannot (yet): torch not imported (an import
    hook then finishes the job), torch built without distributed, or uccl built without torch.
    """
    if _registered:
        return True
    if not _extension_built():
        return False
    c10d = sys.modules.get(_C10D_MODULE)
    if c10d is None or not hasattr(c10d, "Backend"):
        _arm_import_hook()
        return False
    return _register_with(c10d)


class _RegisterAfterC10d(importlib.abc.MetaPathFinder):
    """Registers the backend as soon as torch.distributed.distributed_c10d finishes loading.

    Covers ``import uccl`` before ``import torch`` with torch's entry-point autoload disabled.
    It only wraps that one module's loader, then removes itself.
    """

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _C10D_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RegisteringLoader(spec.loader)
        _disarm_import_hook()
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        try:
            if _extension_built() and hasattr(module, "Backend"):
                _register_with(module)
        except Exception as e:  # never break torch's import over our registration
            import warnings

            warnings.warn(f"uccl: could not register torch.distributed backend 'uccl': {e}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_hook: Optional[_RegisterAfterC10d] = None


def _arm_import_hook() -> None:
    global _hook
    with _lock:
        if _hook is None and _C10D_MODULE not in sys.modules:
            _hook = _RegisterAfterC10d()
            sys.meta_path.insert(0, _hook)


def _disarm_import_hook() -> None:
    global _hook
    with _lock:
        if _hook is not None:
            try:
                sys.meta_path.remove(_hook)
            except ValueError:
                pass
            _hook = None


def describe(group: Any = None) -> str:
    """uccl's description of a group's communicator (levels, peers, transport per peer)."""
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu")).describe()
