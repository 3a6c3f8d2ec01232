#!/usr/bin/env python3
"""Checks that includes in the C++ tree point down the floors only (docs/ARCHITECTURE.md).

    include/uccl  <  cpp/base  <  cuda  <  cpp/bootstrap  <  cpp/topology  <  transports  <  cpp/algorithms  <  cpp/core  <  cpp/capi

A file may include headers of its own floor and of the floors below it, never above. The
public headers (include/uccl) include only each other and the standard library, so that an
embedder needs nothing else. A transport folder (transports/tcp, ...) includes only its own
folder and the transport-wide headers (transports/*.h), never another transport: each one is a
folder plus one registration. Only core includes uccl/communicator.h (the interface it
implements) and uccl/estimator.h (a Communicator core implements); those two public headers may
include each other. python/, tests/ and benchmarks/ sit on top and may include anything.

Usage: scripts/check_layers.py [ROOT]   (exit status 1 and one line per violation)
"""
import os
import re
import sys

# (folder, include prefix, floor)
FLOORS = [
    ("include/uccl", "uccl/", 0),
    ("cpp/base", "base/", 1),
    ("cuda", "cuda/", 1.5),  # the CUDA device backend: base's interface, used by transports/cuda_ipc
    ("cpp/bootstrap", "bootstrap/", 2),
    ("cpp/topology", "topology/", 3),
    ("transports", "transports/", 4),
    ("cpp/algorithms", "algorithms/", 5),
    ("cpp/core", "core/", 6),
    ("cpp/capi", "capi/", 7),  # the C API (include/uccl/uccl.h) over the C++ one
]
# The public Communicator is implemented by core: the floors below it use the vocabulary
# headers (types.h, args.h, work.h, status.h, store.h), not the interface.
CORE_ONLY = {"uccl/communicator.h", "uccl/estimator.h"}
CORE_FLOOR = 6
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCE = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh", ".in")


def floor_of_file(rel):
    for folder, _, floor in FLOORS:
        if rel.startswith(folder + "/"):
            return folder, floor
    return None, None


def floor_of_include(inc):
    for folder, prefix, floor in FLOORS:
        if inc.startswith(prefix):
            return folder, floor
    return None, None


def transport_folder(path):
    """'transports/tcp/x.h' -> 'transports/tcp'; transport-wide files -> None."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[0] == "transports" else None


def violations(root):
    out = []
    for folder, _, _ in FLOORS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                my_folder, my_floor = floor_of_file(rel)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    line = text.count("\n", 0, m.start()) + 1
                    inc_folder, inc_floor = floor_of_include(inc)
                    where = f"{rel}:{line}: includes \"{inc}\""
                    if inc_folder is None:
                        if my_floor == 0:
                            out.append(f"{where}: a public header may include only uccl/ headers")
                        elif "/" in inc and inc != "build_info.h":
                            out.append(f"{where}: not a header of a known floor")
                        continue
                    if inc_floor > my_floor:
                        out.append(f"{where}: {inc_folder} is above {my_folder} (includes must point down)")
                        continue
                    if inc in CORE_ONLY and my_floor < CORE_FLOOR and rel.replace("include/", "", 1) not in CORE_ONLY:
                        out.append(f"{where}: the Communicator interface is core's; {my_folder} takes "
                                   "uccl/types.h, args.h or work.h instead")
                        continue
                    mine, theirs = transport_folder(rel), transport_folder(inc)
                    if mine and theirs and mine != theirs:
                        out.append(f"{where}: one transport must not include another ({theirs})")
    return out


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = violations(root)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) run back up the floors (see docs/ARCHITECTURE.md)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
