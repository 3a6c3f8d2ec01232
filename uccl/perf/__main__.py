"""Entry point of `uccl-perf` and `python -m uccl.perf` (see uccl/perf/__init__.py)."""
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    from . import args as cli
    a = cli.parse(argv)
    if a.nranks > 0:
        from .local import launch
        return launch(a.nranks, argv)

    import uccl
    from . import driver
    options = {k: v for k, v in (("transport", a.transport), ("algorithm", a.algorithm)) if v}
    try:
        comm = uccl.init(timeout=a.timeout if a.timeout > 0 else None, **options)
        errors = driver.run(comm, a)
    except uccl.UcclError as e:
        print(f"uccl-perf: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
