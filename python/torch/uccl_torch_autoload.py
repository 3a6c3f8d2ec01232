"""Top-level shim for torch's "torch.backends" entry point (installed beside the uccl package).

Why it exists: torch imports every "torch.backends" entry point during ``import torch`` and
turns any failure into a failed ``import torch``. With the entry point at
``uccl._torch_autoload:autoload``, Python must first import the ``uccl`` package itself; when a
uccl source checkout shadows the installed package (running from the repository root, where
``uccl/`` has no compiled ``_core``) or uccl is broken, that import fails before any of our code
can catch it, and ``import torch`` fails for everyone. A module outside the package cannot be
shadowed that way and catches everything:

    [project.entry-points."torch.backends"]
    uccl = "uccl_torch_autoload:autoload"
"""


def autoload() -> None:
    try:
        from uccl._torch_autoload import autoload as _autoload
    except Exception as e:  # noqa: BLE001 - must never break `import torch`
        import warnings

        warnings.warn(f"uccl: torch.distributed backend 'uccl' not registered (import uccl failed: {e})",
                      stacklevel=2)
        return
    _autoload()
