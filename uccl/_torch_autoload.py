"""The ``torch.backends`` entry point: ``import torch`` calls autoload() (see pyproject.toml).

torch 2.x runs every entry point of the group "torch.backends" near the end of its own import
(torch/__init__.py ``_import_device_backends``; the mechanism is meant for out-of-tree device
backends, but it calls any callable, and torch.distributed is already imported by then). That
makes ``init_process_group(backend="uccl")`` work without ``import uccl``. Set
TORCH_DEVICE_BACKEND_AUTOLOAD=0 to switch it off; ``import uccl`` still registers.

torch turns an exception raised here into a failed ``import torch``, so nothing may escape: a
broken uccl install must never break torch for everyone else.
"""


def autoload() -> None:
    try:
        from uccl import _torch_backend

        _torch_backend.register()
    except Exception as e:  # noqa: BLE001 - see module docstring
        import warnings

        warnings.warn(f"uccl: torch.distributed backend 'uccl' not registered: {e}", stacklevel=2)
