#!/usr/bin/env bash
# One device call (2026-11-28 evening): build; the eager-loading hang's variants side by side with
# the staged collective tests; then staged vs Gloo at the new 8 MiB chunk and the chunk sweep.
set -u
export PYTHONUNBUFFERED=1
ROOT=$(pwd); R=/tmp/gd; mkdir -p $R
pack() { tar czf "$OUT/gd.tgz" -C /tmp gd; }
UCCL_GPU_PARTS=cpp timeout 240 bash tests/gpu/run.sh $R/build; pack
for v in signal sidestream conn32 host; do
  e=(CUDA_MODULE_LOADING=EAGER UCCL_TIMEOUT_S=400)
  [ $v = conn32 ] && e+=(CUDA_DEVICE_MAX_CONNECTIONS=32)
  [ $v = host ] && e+=(UCCL_STREAM_WAIT=host)
  (cd /tmp && env "${e[@]}" timeout 250 python3 $ROOT/gpu_diag/eager.py $v 110 > $R/eager_$v.log 2>&1; echo "rc=$?" >> $R/eager_$v.log) &
done
(cd /tmp && timeout 250 python3 -m pytest -q -rfE --tb=short -n 4 -p no:cacheprovider --rootdir $ROOT \
   $ROOT/tests/gpu/test_gpu_collectives.py -k "test_every_collective_on_cuda and staged" > $R/staged_tests.log 2>&1) &
wait
for v in signal sidestream conn32 host; do echo "== $v: $(tail -1 $R/eager_$v.log)"; done
tail -3 $R/staged_tests.log
pack
(cd /tmp && timeout 200 python3 $ROOT/tests/gpu/bench_gpu.py --out $R --modes staged,gloo --sizes 4,16,64,256 --no-ddp) > $R/bench.log 2>&1
cat $R/bench_gpu.md
pack
