#!/usr/bin/env bash
# The main job: set-up, build and install uccl, then a local multi-rank benchmark on the
# default transports of one host (shared memory, and TCP over loopback).
#
#   bash scripts/demo.sh                 # 4 local ranks
#   RANKS=8 bash scripts/demo.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$UCCL_ROOT"
RANKS="${RANKS:-4}"

echo "== build and install the Python package (editable: the source uccl/ is the package)"
"$PYTHON" -m pip install --no-build-isolation -q -e .

"$PYTHON" -m uccl.info | sed -n '1,6p'
if "$PYTHON" -c "import uccl.perf.__main__" >/dev/null 2>&1; then
  for coll in all_reduce all_gather reduce_scatter broadcast; do
    for transport in shm tcp; do
      echo "== uccl-perf $coll, $RANKS ranks, $transport"
      "$PYTHON" -m uccl.perf "$coll" -N "$RANKS" -b 4K -e 16M -f 16 -n 10 -w 2 --transport "$transport"
    done
  done
else
  "$PYTHON" "$UCCL_ROOT/examples/demo.py" --ranks "$RANKS" --transports auto,tcp
fi
