#!/usr/bin/env bash
# The GPU checks of issues 31 and 32, prepared for a session that is lent a GPU (the workplace's `device` tool):
# a task gets about 15 minutes of device time in all, one command at most 10, so each stage below is one call,
# ended by `timeout` well inside the call, keeping what it finished; its tables come back under $OUT.
#
# Here first (the GPU machine reaches no package registry), from the repository root:
#     bash benchmarks/gpu_wheels.sh                  # OR-Tools, HiGHS and their needs into .whl/ (git-ignored)
# Then one device call per stage (the GPU machine gets the work tree without git: name the commit):
#     run(command="HYBRID_COMMIT=<sha> bash benchmarks/gpu_session.sh smoke executor", carry=[".whl"], timeout_s=600)
#     run(command="HYBRID_COMMIT=<sha> bash benchmarks/gpu_session.sh vs_torch", carry=[".whl"], timeout_s=600)
# and copy the reply's files (under files_at) into results/; `give_back` unless another call follows at once.
#
# Stages (device minutes, estimated from the last H100 run of executor_gpu and the CPU timings of vs_torch):
#   smoke     ~1: torch sees the GPU, the wheels import, the planner's kernels compile (cached for the stages
#             after it on the same machine); executor_gpu's tiny models on cuda
#   executor  ~8: benchmarks/executor_gpu.py on resnet-50, vgg16 and rnn-4-2k at 60% and 35% of their peak, with
#             `hybrid optimize`'s written (laid-out) plan as a row (issue 31: zero compactions, measured within
#             5% of simulated, the simulator's ranking kept)
#   vs_torch  ~7: benchmarks/vs_torch.py --measured-only on resnet-50, vgg16, unet, gpt2, llama: eager, checkpoint,
#             save_on_cpu, checkpoint + save_on_cpu measured, then hybrid planned at their peaks and run
#             (issue 32: 1.10x the best alternative at its peak, torch's peak within the plan + 1%, the no-limit
#             plan 0.95x eager or better)
#   compile   ~5: the same with torch.compile's activation_memory_budget 0.5 and 0.2 (a compile a minute each)
#   sanitizer ~1: executor_gpu's TORCH_CUDA_SANITIZER run (no stream races)
# STAGE_SECONDS (default 540) bounds each stage. GPU_SESSION_DEVICE=cpu runs the stages' code on the CPU with tiny
# models (a smoke test of this script here, not figures; its tables go to $OUT only).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hybrid-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/session.log"
limit=${STAGE_SECONDS:-540}
export PYTHONUNBUFFERED=1 HYBRID_COMMIT=${HYBRID_COMMIT:-unknown}
PY=${PYTHON:-python3}
DEV=${GPU_SESSION_DEVICE:-cuda}
if [ "$DEV" = cpu ]; then   # tiny models, tables under $OUT only
    EG=(--device cpu --quick --iters 2 --fractions 0.5); VT=(--measure-on cpu --quick --iters 2)
    EG_MAIN=(--out "$OUT/executor_gpu.md"); VT_ONLY=resnet-50,transformer-lm
else
    EG=(); VT=(); EG_MAIN=(); VT_ONLY=resnet-50,vgg16,unet,gpt2,llama
fi

if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "error: installing .whl/ failed" | tee -a "$LOG"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi

keep() {   # copy the tables a stage wrote (whole or partial) to $OUT; on the CPU they are written there already
    [ "$DEV" = cpu ] && return 0
    for f in "$@"; do [ -f "$f" ] && cp "$f" "$OUT/"; done
}

run_stage() {
    local stage=$1
    echo "=== $stage ($(date -u +%H:%M:%S))" | tee -a "$LOG"
    case "$stage" in
    smoke)
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
        "$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import time, torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), gpu)
import numba, ortools, highspy, pandas
print("numba", numba.__version__, "ortools", ortools.__version__, "pandas", pandas.__version__)
t = time.time()
from hybrid.swap.planner import compile_kernels
compile_kernels()
print(f"planner kernels ready in {time.time() - t:.1f} s")
EOF
        smoke=(--models resnet-18 rnn-2-1k --fractions 0.5 --iters 4)
        if [ "$DEV" = cpu ]; then smoke=("${EG[@]}"); fi
        timeout "$limit" "$PY" -m benchmarks.executor_gpu "${smoke[@]}" --ga-seconds 20 --no-sanitizer \
            --out "$OUT/executor_gpu_smoke.md" 2>&1 | tee -a "$LOG"
        ;;
    executor)
        if [ "$DEV" = cpu ]; then models=(); else models=(--models resnet-50 vgg16 rnn-4-2k); fi
        timeout "$limit" "$PY" -m benchmarks.executor_gpu "${EG[@]}" "${models[@]}" --ga-seconds 30 --no-sanitizer \
            "${EG_MAIN[@]}" 2>&1 | tee -a "$LOG"
        keep results/executor_gpu.md results/executor_gpu.csv results/executor_gpu.json
        ;;
    sanitizer)
        [ "$DEV" = cpu ] && { echo "the sanitizer needs CUDA: skipped" | tee -a "$LOG"; return 0; }
        timeout "$limit" "$PY" -m benchmarks.executor_gpu --sanitizer-only --append 2>&1 | tee -a "$LOG"
        keep results/executor_gpu.md results/executor_gpu.csv results/executor_gpu.json
        ;;
    vs_torch)
        timeout "$limit" "$PY" -m benchmarks.vs_torch --measured-only --only "$VT_ONLY" --iters 8 "${VT[@]}" \
            --alternatives eager,checkpoint,save_on_cpu,checkpoint+save_on_cpu 2>&1 | tee -a "$LOG"
        keep results/vs_torch_measured.md results/vs_torch_measured.csv
        if [ "$DEV" = cpu ]; then mv results/vs_torch_measured_quick.* "$OUT/"; fi
        ;;
    compile)
        timeout "$limit" "$PY" -m benchmarks.vs_torch --measured-only --only "$VT_ONLY" --iters 8 "${VT[@]}" \
            --alternatives compile_budget_0.5,compile_budget_0.2 --hybrid-at all --part compile 2>&1 | tee -a "$LOG"
        tar -C out -cf "$OUT/vs_torch_measured_parts.tar" vs_torch_measured_parts 2>/dev/null
        ;;
    *)
        echo "error: unknown stage '$stage' (smoke, executor, sanitizer, vs_torch, compile)" | tee -a "$LOG"
        return 2
        ;;
    esac
    echo "=== $stage done ($(date -u +%H:%M:%S))" | tee -a "$LOG"
}

[ $# -gt 0 ] || { echo "usage: bash benchmarks/gpu_session.sh STAGE [STAGE ...] (see the comment at the top)"; exit 2; }
for stage in "$@"; do
    run_stage "$stage"
done
