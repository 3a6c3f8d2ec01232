#!/usr/bin/env bash
# Second diagnosis call: where the signal-wait hang waits (native stacks), IPC on and off.
set -u
export PYTHONUNBUFFERED=1
ROOT=$(pwd); R=/tmp/gd2; mkdir -p $R
pack() { tar czf "$OUT/gd2.tgz" -C /tmp gd2; }
UCCL_GPU_PARTS=none timeout 150 bash tests/gpu/run.sh $R/build > /dev/null 2>&1; tail -2 $R/build/run.log
for v in default side default-noipc side-noipc; do
  ipc=on; case $v in *noipc) ipc=off ;; esac
  (cd /tmp && CUDA_MODULE_LOADING=EAGER UCCL_CUDA_IPC=$ipc UCCL_DEBUG=INFO timeout 150 python3 $ROOT/gpu_diag/repro.py $v 45 \
     > $R/repro_$v.log 2>&1; echo "rc=$?" >> $R/repro_$v.log) &
done
wait
for v in default side default-noipc side-noipc; do echo "== $v: $(tail -1 $R/repro_$v.log)"; done
pack
