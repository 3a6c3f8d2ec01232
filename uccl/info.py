"""python -m uccl.info: what was built, every UCCL_* setting, and the network interfaces.

python -m uccl.info --cmakedir | --pkgconfigdir | --includedir prints where the installed package
keeps ucclConfig.cmake, uccl.pc and the headers (like pybind11 --cmakedir), for C and C++ builds:
cmake -Duccl_DIR=$(python -m uccl.info --cmakedir), PKG_CONFIG_PATH=$(python -m uccl.info --pkgconfigdir).

python -m uccl.info --probe, started on every rank by a launcher (torchrun, mpirun, or RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT), creates the world communicator, measures the link rates
of every topology level (UCCL_PROBE=on unless set) and prints, on rank 0, the topology with the
rates the cost model uses, where each came from, and the probe's own figures.
"""
import os
import sys

from . import _core, build_info, config


def main(out=sys.stdout):
    info = build_info()
    print(f"uccl {info['version']} ({info['build_type']})", file=out)
    print("built:", file=out)
    for part in ("verbs", "cuda", "torch"):
        print(f"  {part:6s} {'yes' if info[part] else 'not built'}", file=out)
    reason = info.get("verbs_unavailable_reason") or ""
    print(f"  verbs usable here: {'yes' if info['verbs_available'] else 'no'}"
          f"{' (' + reason + ')' if reason and not info['verbs_available'] else ''}", file=out)
    sec = _core.security_info()
    print("security:", file=out)
    print(f"  authentication: {sec['authentication']}", file=out)
    print(f"  encryption: {sec['encryption']}", file=out)
    print("device backends:", file=out)
    for b in info.get("device_backends", []):
        chunk = b.get("staging_chunk_bytes") or 0
        state = (f"available, {b['devices']} device(s), streams wait by {b['stream_wait']}"
                 + f", uccl's copies by {b['copies']}"
                 + (f", staging chunk {chunk >> 10} KiB" if chunk else "") if b["available"]
                 else f"not available ({b['why_not']})")
        print(f"  {b['name']:6s} {b['kind']:6s} {state}", file=out)
    print("\nsettings (UCCL_*):", file=out)
    section = None
    for v in config():
        if v.get("section") != section:
            section = v.get("section")
            print(f"  [{section}]", file=out)
        mark = "*" if v["is_set"] else " "
        job = " [job-wide]" if v.get("job") else ""
        print(f" {mark}{v['name']:28s} = {v['value']!s:10s} (default {v['default']!s}){job} {v['meaning']}", file=out)
        if v.get("error"):
            print(f"   ! refused: {v['error']}", file=out)
    print("  (* = set in the environment; ! = refused: the default is used, and creating a communicator fails;\n"
          "   job-wide = decides what the ranks exchange: must be the same on every rank, or they refuse to connect)",
          file=out)
    print("\nnetwork interfaces:", file=out)
    for i in _core.interfaces():
        speed = f"{i['speed_gbps']:g} Gbit/s" if i["speed_gbps"] else "speed unknown"
        print(f"  {i['name']:10s} {i['address']:30s} {'up' if i['up'] else 'down'}"
              f"{' loopback' if i['loopback'] else ''} {speed}", file=out)


def probe(out=sys.stdout):
    os.environ.setdefault("UCCL_PROBE", "on")  # read when the first communicator is created
    import numpy as np

    from .launch import init
    comm = init()
    if comm.size < 2:
        print("one rank: no link to probe (start this on every rank with a launcher)", file=out)
        return
    comm.all_reduce(np.zeros(1, np.float32))  # the first collective that chooses by topology probes
    text = comm.describe()
    if comm.rank == 0:
        print("\n".join(l for l in text.splitlines() if not l.lstrip().startswith("path to rank")), file=out)
    comm.barrier()


_DIRS = {"--cmakedir": ("lib", "cmake", "uccl"), "--pkgconfigdir": ("lib", "pkgconfig"), "--includedir": ("include",)}


def package_dir(flag):
    """The installed package's directory for one of _DIRS' flags. An editable install (the
    README's set-up) splits the package: the Python sources in the checkout, the compiled parts
    and these files in site-packages; the package's __path__ lists both."""
    import uccl
    dirs = [os.path.join(p, *_DIRS[flag]) for p in uccl.__path__]
    return next((d for d in dirs if os.path.isdir(d)), dirs[0])


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--probe":
        probe()
    elif len(sys.argv) == 2 and sys.argv[1] in _DIRS:
        print(package_dir(sys.argv[1]))
    elif len(sys.argv) > 1:
        sys.exit(f"usage: python -m uccl.info [--probe | {' | '.join(_DIRS)}]")
    else:
        main()
