#!/usr/bin/env bash
# The GPU tests and benchmarks, in one command, on a machine with an NVIDIA GPU:
#
#     bash tests/gpu/run.sh [RESULTS_DIR]        (default: tests/gpu/results)
#
# 1. says "no GPU" and exits 0 (skipped) where there is none;
# 2. builds uccl with the CUDA backend (pip install --no-build-isolation . with
#    UCCL_WITH_CUDA=ON) into the current Python, and the C++ tests (build/gpu);
# 3. runs the smoke test (tests/gpu/smoke.py: two ranks, step by step, rank 0 under cuda-gdb;
#    host buffers only first, then CUDA tensors; machine.txt lists the NICs and RDMA devices),
#    the C++ device tests (cuda_backend_test: kernels bit-equal to the host's on the GPU,
#    elementwise_test), then the Python GPU tests, the short broad ones first (test_gpu_arrays:
#    CuPy and JAX arrays; test_gpu_torch: the torch backend on CUDA tensors, stream ordering,
#    wait(), DDP with comm hooks and Join/ZeRO, FSDP2, FSDP1, SyncBatchNorm, DeviceMesh,
#    pipelining, torch.distributed.checkpoint), then test_gpu_collectives
#    (every collective on CUDA buffers through IPC and staged paths, mixed CUDA/host ranks,
#    several ranks on one GPU, a kernel writing the buffer right before the collective);
# 4. runs the benchmarks (tests/gpu/bench_gpu.py, tests/gpu/reduce_bench.cc) and writes
#    RESULTS_DIR/gpu_results.md (+ .json, logs). Exit status: 0 when every test passed.
# Environment: PYTHON (default python3), UCCL_GPU_SKIP_BUILD=1 to reuse an installed build,
# UCCL_GPU_SMOKE_S (default 240) to bound each smoke run,
# UCCL_GPU_PARTS (default smoke,cpp,pytest,bench) to run only some parts, UCCL_GPU_PYTEST_S
# (default 600) to bound the Python tests, UCCL_GPU_TEST_S (default 240) each test,
# UCCL_GPU_PYTEST_WORKERS (default 6) pytest-xdist's workers. On the H200 of 2026-11-27 the build
# took ~1 minute and everything ~520 s in one device call (whose limit is 600 s); on 2026-11-28 the
# build ~50 s, the whole call 477 s of which ~150 s were hangs since fixed, the Python tests alone 73 s
# with 6 workers (benchmarks/results/gpu_h200_20261128); that evening the whole recipe 266 s, of which
# the Python tests 99 s (benchmarks/results/gpu_h200_20261128b). Run the parts in one call, results under a
# folder that is then packed into one file of $OUT (8 files come back):
#     export UCCL_GPU_SMOKE_S=60 UCCL_GPU_TEST_S=200; R=/tmp/gpu
#     UCCL_GPU_PARTS=smoke,cpp,bench timeout 330 bash tests/gpu/run.sh $R/a
#     UCCL_GPU_SKIP_BUILD=1 UCCL_GPU_PARTS=pytest UCCL_GPU_PYTEST_S=$((545 - SECONDS)) bash tests/gpu/run.sh $R/b
#     tar czf $OUT/gpu.tgz -C /tmp gpu
set -u
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${1:-$ROOT/tests/gpu/results}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LOG="$OUT/run.log"
: > "$LOG"
say() { echo "[gpu] $*" | tee -a "$LOG"; }

if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
  say "no NVIDIA GPU on this machine (nvidia-smi finds none): GPU tests SKIPPED"
  exit 0
fi
nvidia-smi -L | tee -a "$LOG"
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -z "$NVCC" ]; then
  say "a GPU but no nvcc (CUDA toolkit): the CUDA backend cannot be built here: FAILED"
  exit 1
fi
export CUDACXX=$NVCC
say "nvcc: $NVCC ($($NVCC --version | tail -1))"

status=0
PARTS=",${UCCL_GPU_PARTS:-smoke,cpp,pytest,bench},"
part() { [[ "$PARTS" == *",$1,"* ]]; }
if [ "${UCCL_GPU_SKIP_BUILD:-0}" != 1 ]; then
  # Only this GPU's architecture (one nvcc pass instead of CI's two), and the two builds side by
  # side: each has long serial steps (nvcc on the kernels, the torch extension's link).
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  arch=(); [ -n "$cap" ] && arch=(-DCMAKE_CUDA_ARCHITECTURES="$cap-real")
  say "building uccl with CUDA (pip install --no-build-isolation .) and the C++ device tests (build/gpu), ${arch[*]:-default architectures}"
  { cmake -S . -B build/gpu -DUCCL_WITH_CUDA=ON -DUCCL_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release "${arch[@]}" &&
    cmake --build build/gpu -j"$(nproc)" --target cuda_backend_test elementwise_test reduce_kernels_test; } \
    > "$OUT/build_cpp.log" 2>&1 &
  cpp_build=$!
  if ! CMAKE_ARGS="-DUCCL_WITH_CUDA=ON ${arch[*]} ${CMAKE_ARGS:-}" "$PY" -m pip install --no-build-isolation -q . >> "$LOG" 2>&1; then
    say "pip install failed (see $LOG)"; wait; exit 1
  fi
  say "pip install done"
  if ! wait $cpp_build; then
    say "C++ build failed (see $OUT/build_cpp.log)"; tail -20 "$OUT/build_cpp.log" >> "$LOG"; exit 1
  fi
  say "C++ device tests built"
fi
# Run from outside the tree so that `import uccl` finds the installed build.
(cd /tmp && "$PY" -c "import uccl, json; print(json.dumps(uccl.build_info()))") | tee "$OUT/build_info.json" | tee -a "$LOG"
if ! (cd /tmp && "$PY" -c "import uccl, sys; sys.exit(0 if uccl.build_info().get('cuda_available') else 1)"); then
  say "uccl says CUDA is not usable here (build_info above): FAILED"
  exit 1
fi

# The smoke test first: two ranks, each step printed, so that a crash names its step; rank 0
# runs under cuda-gdb where the machine has it (it debugs host code too) for a native stack.
GDB=$(command -v cuda-gdb || true)
# What the machine has that uccl's set-up looks at (NICs, RDMA devices), for a crash there.
part smoke && {
  echo "== network interfaces"; { command -v ip > /dev/null && ip -brief link; } || ls /sys/class/net 2>&1
  echo "== /sys/class/infiniband"; ls /sys/class/infiniband 2>&1
  echo "== python -m uccl.info"; (cd /tmp && timeout 60 "$PY" -m uccl.info 2>&1)
} > "$OUT/machine.txt" 2>&1
# Variants: "host" (no torch, host buffers only: a crash there is uccl's set-up on this machine,
# not CUDA), then CUDA tensors with IPC off and on.
# A failing "host" run is then bisected over uccl's set-up: each variant turns one part off.
SMOKE_S=${UCCL_GPU_SMOKE_S:-240}
smoke() {  # smoke NAME MODE(host|cuda) ENV...: one two-rank run, logs smoke_NAME.rank*.log
  local name=$1 mode=$2; shift 2
  local port=$((20000 + RANDOM % 20000)) extra=()
  [ "$mode" = host ] && extra=(host)
  local r0=("$PY" -X faulthandler "$ROOT/tests/gpu/smoke.py" 0 2 "$port" "${extra[@]}")
  [ -n "$GDB" ] && r0=("$GDB" -q -batch -ex "set pagination off" -ex "set cuda api_failures ignore" -ex run \
                        -ex "thread apply all bt 30" --args "${r0[@]}")
  (cd /tmp && env "$@" timeout "$SMOKE_S" "${r0[@]}") > "$OUT/smoke_$name.rank0.log" 2>&1 &
  (cd /tmp && env "$@" timeout "$SMOKE_S" "$PY" -X faulthandler "$ROOT/tests/gpu/smoke.py" 1 2 "$port" "${extra[@]}") \
    > "$OUT/smoke_$name.rank1.log" 2>&1
  wait
  if grep -q "done, 0 wrong" "$OUT/smoke_$name.rank0.log" && grep -q "done, 0 wrong" "$OUT/smoke_$name.rank1.log"; then
    say "smoke ($name: $*): passed"; return 0
  fi
  say "smoke ($name: $*): FAILED; last steps:"
  for r in 0 1; do grep "^\[rank" "$OUT/smoke_$name.rank$r.log" | tail -2 | tee -a "$LOG"; done
  return 1
}
if part smoke; then
  if ! smoke host host UCCL_CUDA_IPC=off; then
    status=1
    smoke host_nocuda host CUDA_VISIBLE_DEVICES= UCCL_CUDA_IPC=off
    smoke host_tcp host UCCL_TRANSPORT=tcp UCCL_CUDA_IPC=off
    smoke host_norails host UCCL_RAIL_NICS=off UCCL_PROBE=off UCCL_CUDA_IPC=off
    smoke host_noexpress host UCCL_EXPRESS=0 UCCL_PROGRESS_THREAD=0 UCCL_SHM_CMA=0 UCCL_CUDA_IPC=off
  fi
  smoke off cuda UCCL_CUDA_IPC=off || status=1
  smoke on cuda UCCL_CUDA_IPC=on || status=1
fi

part cpp && for t in cuda_backend_test elementwise_test reduce_kernels_test; do
  if build/gpu/tests/cpp/$t > "$OUT/$t.log" 2>&1; then say "$t: passed"; else say "$t: FAILED (see $OUT/$t.log)"; status=1; fi
done

if part pytest; then
  say "python GPU tests"
  G=$ROOT/tests/gpu
  files=("$G/test_gpu_arrays.py" "$G/test_gpu_torch.py")  # short and broad first, then the rest
  for f in "$G"/test_*.py; do case " ${files[*]} " in *" $f "*) ;; *) files+=("$f") ;; esac; done
  # Several scenarios at once where pytest-xdist is there (the GPU machines have 16 cores), and a
  # bound per test where pytest-timeout is, so that one hang cannot take the whole budget.
  popts=(-q -rfE --tb=short)
  "$PY" -c "import xdist" 2> /dev/null && popts+=(-n "${UCCL_GPU_PYTEST_WORKERS:-6}")
  "$PY" -c "import pytest_timeout" 2> /dev/null && popts+=(--timeout "${UCCL_GPU_TEST_S:-240}")
  say "pytest ${popts[*]}"
  if (cd /tmp && UCCL_GPU_OUT="$OUT" timeout "${UCCL_GPU_PYTEST_S:-600}" "$PY" -m pytest "${popts[@]}" -p no:cacheprovider --rootdir "$ROOT" \
        "${files[@]}" --junitxml "$OUT/pytest.xml" > "$OUT/pytest.log" 2>&1); then
    say "python GPU tests: passed"
  else
    say "python GPU tests: FAILED (see $OUT/pytest.log)"; status=1
  fi
  tail -3 "$OUT/pytest.log" | tee -a "$LOG"
fi
part bench || exit $status

say "benchmarks"
c++ -O2 -std=c++17 -I include -I cpp -I . -I build/gpu/generated tests/gpu/reduce_bench.cc \
    -DUCCL_HAVE_CUDA=1 -Lbuild/gpu -luccl -Wl,-rpath,"$ROOT/build/gpu" -o build/gpu/reduce_bench >> "$LOG" 2>&1 &&
  build/gpu/reduce_bench > "$OUT/reduce_bench.md" 2>> "$LOG" || { say "reduce_bench failed"; status=1; }
(cd /tmp && "$PY" "$ROOT/tests/gpu/bench_gpu.py" --out "$OUT") >> "$LOG" 2>&1 || { say "bench_gpu.py failed (see $LOG)"; status=1; }
# Issue 14's staging goal on the simulated device (staged within 1.25x of host from 1 MiB up), on
# a machine whose cores outnumber the ranks' threads: on the 2-core development machine the
# device's stream threads take their copies' CPU from the ranks themselves.
(cd /tmp && timeout 120 "$PY" "$ROOT/benchmarks/staged_bench.py" --world 2 --transport shm --sizes 1M,4M,16M,64M \
   --iters 15 > "$OUT/staged_sim.md" 2>> "$LOG") || { say "staged_bench.py failed (see $LOG)"; status=1; }
{
  echo "# uccl GPU results ($(date -u +%Y-%m-%dT%H:%MZ), $(hostname))"
  echo
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/GPU: /'
  echo "load: $(uptime)"
  echo
  cat "$OUT/reduce_bench.md" 2>/dev/null
  echo
  cat "$OUT/bench_gpu.md" 2>/dev/null
  echo
  echo "## Staged all_reduce of simulated-device buffers on this machine's CPUs (benchmarks/staged_bench.py, $(nproc) cores)"
  echo
  cat "$OUT/staged_sim.md" 2>/dev/null
} > "$OUT/gpu_results.md"
say "results: $OUT/gpu_results.md"
cat "$OUT/gpu_results.md"
exit $status
