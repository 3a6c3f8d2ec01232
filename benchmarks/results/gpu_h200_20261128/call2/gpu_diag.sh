#!/usr/bin/env bash
# Throwaway: the third GPU session's second call (not committed).
set -u
export PYTHONUNBUFFERED=1
ROOT=$(pwd); O=${OUT:-/tmp/o}; mkdir -p $O
left() { echo $(( $1 - SECONDS )); }
CMAKE_ARGS="-DUCCL_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real" python3 -m pip install --no-build-isolation -q . > $O/build.log 2>&1 || { tail -40 $O/build.log; exit 1; }
echo "built at $SECONDS s"
cd /tmp
python3 -c "import uccl, json; print(json.dumps(uccl.build_info()['device_backends']))"
timeout -k 5 $(left 175) python3 -m pytest -q -rfE --tb=short -n 6 --timeout 140 -p no:cacheprovider --rootdir $ROOT \
  $ROOT/tests/gpu/test_gpu_torch.py $ROOT/tests/gpu/test_gpu_collectives.py $ROOT/tests/gpu/test_gpu_arrays.py \
  --junitxml $O/pytest.xml > $O/pytest.log 2>&1
echo "pytest rc $? at $SECONDS s"; tail -12 $O/pytest.log
B="python3 $ROOT/tests/gpu/bench_gpu.py --out /tmp --no-ddp --modes staged --sizes 64,256"
{ for cfg in "512K 8M" "512K 64M" "2M 64M" "8M 64M"; do
    set -- $cfg; echo "== chunk $1 bounce $2 (at $SECONDS s)"
    UCCL_STAGED_CHUNK_BYTES=$1 UCCL_STAGED_BOUNCE_BYTES=$2 timeout -k 2 $(left 255) $B 2>&1 | grep -E "^\| (64|256) MiB|^  peer 1:" | cut -c1-400
  done
  echo "== ddp + torch-uccl (at $SECONDS s)"
  timeout -k 2 $(left 285) python3 $ROOT/tests/gpu/bench_gpu.py --out /tmp --modes torch-uccl,gloo --sizes 64 2>&1 | grep -E "^\||FAILED" | cut -c1-300
} > $O/bench.log 2>&1
cat $O/bench.log
echo "done at $SECONDS s"
