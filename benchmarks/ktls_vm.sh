#!/bin/sh
# Kernel TLS on a kernel that has it (issue 17 item 5): inside the Soft-RoCE VM, whose kernel loads
# the `tls` module, two ranks over tcp run an 8 MiB all_reduce with UCCL_ENCRYPT=none and =all and
# rank 0 prints the time and its connection line (describe() says "kernel send" / "kernel receive"
# per direction when kTLS took the socket). The VM emulates its CPU in software: the times show that
# the path works, not what it costs.
#
#   ../shared/rxe/vm-run -- sh benchmarks/ktls_vm.sh            (PYTHON=... to pick the interpreter)
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
modprobe tls 2>/dev/null || echo "ktls_vm: no tls module here (user-space TLS will be used)"
for enc in none all; do
  P=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P UCCL_TRANSPORT=tcp UCCL_ENCRYPT=$enc \
      UCCL_JOB_KEY=ktls-check-key-0123456789 "$PY" "$HERE/ktls_check.py" &
  done
  wait
done
