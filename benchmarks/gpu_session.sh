#!/usr/bin/env bash
# The GPU checks of issues 31 and 32, prepared for a session that is lent a GPU (the workplace's `device` tool).
# A task gets about 15 minutes of device time in all (each machine start, 1-2 minutes, included; a machine stays
# warm 30 s after a call) and a command at most 10 minutes, so the stages below share one deadline per call
# (CALL_SECONDS, default 570) and every table is written to $OUT as each model finishes: a stage cut short
# still returns the models it did.
#
# Here first (the GPU machine reaches no package registry), from the repository root:
#     bash benchmarks/gpu_wheels.sh                  # OR-Tools, HiGHS and their needs into .whl/ (git-ignored)
# Then (the GPU machine gets the work tree without git: name the commit), one call (on 2026-11-30, H200: 526 s
# of command, 563 s of device time with the machine's start; preflight 6 s, executor 251 s (resnet-50 alone, its
# profile 95 s of it), vs_torch 260 s for five models; every table came back; on 2026-11-28 468 s, rnn-4-2k's
# profile not ending in what was left: give the executor stage resnet-50 alone and 290 s, its end hands the rest
# to vs_torch):
#     run(command="HYBRID_COMMIT=<sha> CALL_SECONDS=565 EXECUTOR_MODELS=resnet-50 EXECUTOR_SECONDS=290 "
#                 "GA_SECONDS=15 HYBRID_SECONDS=12 bash benchmarks/gpu_session.sh preflight executor vs_torch",
#         carry=[".whl"], timeout_s=595)
# copy the reply's files (under files_at) into results/ (profiles/*.json into benchmarks/profiles/, which the next
# session's stages then reuse instead of measuring; executor_gpu.{md,csv,json} merges this run's models into
# the committed table's other rows where that table is this card's; on another card it holds this run's rows
# alone: copy it to a table of its own, as results/executor_gpu_h200.md), then `give_back` unless another call
# follows at once. At most 8 files come back from a call (`preflight executor vs_torch` writes 7: three
# executor_gpu files, two vs_torch_measured ones, session.log and profiles/<card>.json; `smoke` adds one,
# `compile` two). What is left of the 15 minutes (about 5) fits one short call on a warm machine (a fresh start
# needs 4 minutes left), e.g. `python3 -m benchmarks.executor_memory_probe --model vgg16 --memory-mib 3039
# --profile` (where the executor's device bytes go beyond the plan's; it reuses the profile in
# $HYBRID_PROFILE_CACHE: a call's files come back read-only, so `chmod u+w` what is copied from them). Back here,
# `python -m benchmarks.vs_torch_replay` plans the measured peaks again with the card's profile and the bound.
#
# Stages (device minutes; estimates from the H100 run of executor_gpu, CPU timings and, where said, the H200
# run of 2026-11-28):
#   preflight <1: benchmarks/gpu_preflight.py: the CUDA convolution slot writer bitwise against eager on this GPU
#             (where not, the stages after it run convolutions through the copy fallback), cuBLAS's kept bytes,
#             the host link as the plans are timed (CUDA graph replays; new on 2026-11-30, not yet run on a GPU:
#             its line shows the replayed latency beside one copy timed from the host, 29.5 us on the H200)
#   smoke     ~2-3: torch sees the GPU, the wheels import, the planner's kernels compile (cached for the stages
#             after it in the same call), executor_gpu on resnet-18 at 50% with a 10 s `hybrid optimize`
#   vs_torch  ~6-7 (H200, HYBRID_SECONDS=12: 3.5): benchmarks/vs_torch.py --measured-only on resnet-50, vgg16,
#             unet, gpt2, llama: eager, checkpoint, save_on_cpu and checkpoint + save_on_cpu measured, then
#             hybrid planned at eager's, checkpoint's and the fastest other one's peak and run (issue 32: 1.10x
#             the best alternative at its peak, torch's peak within the plan + 1%, the no-limit plan 0.95x eager)
#   executor  ~6-8 (H200, GA_SECONDS=15: resnet-50 4.2, of which its profile 1.3; rnn-4-2k's 2,884-op profile
#             did not end in the 16 s left): benchmarks/executor_gpu.py on resnet-50 and rnn-4-2k at 60% and 35%
#             of their peak with `hybrid optimize`'s written (laid-out) plan as a row (issue 31: zero compactions,
#             measured within 5% of simulated, the simulator's ranking kept); EXECUTOR_MODELS overrides the models
#   compile   ~10: torch.compile's activation_memory_budget 0.5 and 0.2 (a compile a minute each) on
#             COMPILE_MODELS (default resnet-50,gpt2), hybrid at each one's peak: results/vs_torch_measured_compile
#             (.md, .csv); only in a task with device time to spare
#   sanitizer ~1: executor_gpu's TORCH_CUDA_SANITIZER run (no stream races)
# Knobs (environment): CALL_SECONDS (the call's deadline), <STAGE>_SECONDS (a cap on one stage, e.g.
# EXECUTOR_SECONDS=280 leaves the rest of the call to the stages after it), GA_SECONDS (executor's `hybrid optimize`
# seconds, 30), HYBRID_SECONDS (vs_torch's per measured peak, 30), VS_TORCH_MODELS, EXECUTOR_MODELS.
# GPU_SESSION_DEVICE=cpu runs the stages' code on the CPU with tiny models (a smoke test of this script here,
# not figures; everything goes to $OUT).
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: bash benchmarks/gpu_session.sh STAGE [STAGE ...] (see the comment at the top)"; exit 2; }
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hybrid-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/session.log"
deadline=$((SECONDS + ${CALL_SECONDS:-570}))
export PYTHONUNBUFFERED=1
[ -n "${HYBRID_COMMIT:-}" ] && export HYBRID_COMMIT
PY=${PYTHON:-python3}
DEV=${GPU_SESSION_DEVICE:-cuda}
if [ "$DEV" = cpu ]; then   # tiny models
    EG=(--device cpu --quick --iters 2 --fractions 0.5); VT=(--measure-on cpu --quick --iters 2)
    VT_ONLY=resnet-50,transformer-lm; EX_MODELS=(); SMOKE=("${EG[@]}"); CM_ONLY=resnet-50; Q=_quick
else
    EG=(); VT=(--iters 8); VT_ONLY=${VS_TORCH_MODELS:-resnet-50,vgg16,unet,gpt2,llama}; Q=
    read -r -a EX_MODELS <<< "--models ${EXECUTOR_MODELS:-resnet-50 rnn-4-2k}"
    SMOKE=(--models resnet-18 --fractions 0.5 --iters 4); CM_ONLY=${COMPILE_MODELS:-resnet-50,gpt2}
fi

if [ "$DEV" != cpu ] && ls .whl/*.whl >/dev/null 2>&1; then   # the GPU image's Python (3.12) takes them
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "error: installing .whl/ failed (wheels for the GPU image's Python: bash benchmarks/gpu_wheels.sh)" \
             | tee -a "$LOG"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD"
fi
"$PY" -c "import ortools.sat.python.cp_model, highspy" 2>/dev/null || {
    echo "error: OR-Tools or HiGHS missing for $PY: run 'bash benchmarks/gpu_wheels.sh' where the package registries" \
         "are reachable and name .whl in the device call's carry" | tee -a "$LOG"; exit 1; }

# Op times measured on this card and torch in an earlier session (benchmarks/profiles/, committed from a call's
# $OUT/profiles/) are reused, and what this call measures is added there: ResNet-50's profile took 1.3 of its 4.2
# minutes on the H200 (benchmarks.common.measured_profile; one file per card and torch, so another's never read)
mkdir -p "$OUT/profiles"
export HYBRID_PROFILE_CACHE="$OUT/profiles"
prof_name=$("$PY" -c '
import sys, torch
from benchmarks.common import profile_cache_file
print(profile_cache_file(".", "cuda" if torch.cuda.is_available() and sys.argv[1] != "cpu" else "cpu").name)' \
    "$DEV" 2>>"$LOG")
PROFILES=${HYBRID_PROFILES:-benchmarks/profiles}   # where the committed profiles are (a test names another)
if [ -n "$prof_name" ] && [ -f "$PROFILES/$prof_name" ] && [ ! -f "$OUT/profiles/$prof_name" ]; then
    cp "$PROFILES/$prof_name" "$OUT/profiles/"
    echo "profiles: reusing $PROFILES/$prof_name" | tee -a "$LOG"
fi

bounded() {   # run "$@" until the call's deadline (less a margin to copy files) or the stage's cap; log how it
              # ended
    local left=$((deadline - SECONDS - 25)) of="the call"
    if [ -n "${stage_end:-}" ] && [ $((stage_end - SECONDS)) -lt "$left" ]; then
        left=$((stage_end - SECONDS)); of="the stage's cap"
    fi
    if [ "$left" -lt 30 ]; then echo "skipped: $left s left of $of" | tee -a "$LOG"; return 0; fi
    timeout -k 20 "$left" "$@" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || echo "exit $rc$([ "$rc" -eq 124 ] && echo ": stopped at the end of $of")" | tee -a "$LOG"
}

STAMP=$(mktemp)   # touched as each stage starts: `keep` takes only what the stage wrote, never a committed table
keep() {   # move tables a stage wrote under results/ to $OUT
    for f in "$@"; do [ -f "$f" ] && [ "$f" -nt "$STAMP" ] && mv "$f" "$OUT/"; done
    return 0
}

previous_executor_table() {   # the rows executor_gpu's --append keeps: an earlier stage's of this call, else
                              # (on a GPU) the committed table's, read where it is: $OUT gets only what a run wrote
    if [ -f "$OUT/executor_gpu.json" ] || [ "$DEV" = cpu ]; then echo "$OUT/executor_gpu.md"
    else echo results/executor_gpu.md; fi
}

run_stage() {
    local stage=$1 cap_var
    cap_var="$(echo "$stage" | tr a-z A-Z)_SECONDS"   # e.g. EXECUTOR_SECONDS=280: this stage ends by then
    stage_end=; [ -n "${!cap_var:-}" ] && stage_end=$((SECONDS + ${!cap_var}))
    echo "=== $stage ($(date -u +%H:%M:%S), $((deadline - SECONDS)) s left)" | tee -a "$LOG"
    touch -d "1 second ago" "$STAMP"   # a second back: file times may have one-second steps
    case "$stage" in
    preflight)
        # what only CUDA runs, against eager on this GPU; where the convolution slot writer is not eager's here,
        # every later stage of this call uses the copy fallback for convolutions instead
        timeout -k 10 120 "$PY" -m benchmarks.gpu_preflight 2>&1 | tee -a "$LOG"
        rc=${PIPESTATUS[0]}
        if [ "$rc" -ne 0 ]; then   # 1: the writer's bits or bytes are not eager's; 2: it crashed; 124: timed out
            export HYBRID_CUDA_CONV_SLOTS=0
            why=$(case "$rc" in 1) echo "not eager's";; 2) echo "crashed";; 124) echo "timed out";;
                  *) echo "exited abnormally";; esac)
            echo "preflight failed (exit $rc: $why): HYBRID_CUDA_CONV_SLOTS=0 for the stages after it" \
                | tee -a "$LOG"
        fi
        ;;
    smoke)
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
        bounded "$PY" -c '
import time, torch
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), gpu)
import numba, ortools, highspy, pandas
print("numba", numba.__version__, "ortools", ortools.__version__, "pandas", pandas.__version__)
t = time.time()
from hybrid.pipeline.kernels import load_kernels
load_kernels(repair=True, exact_search=False)   # a first run: the walk here, the rest in a second process
print(f"planner kernels ready in {time.time() - t:.1f} s")'
        bounded "$PY" -m benchmarks.executor_gpu "${SMOKE[@]}" --ga-seconds 10 --no-sanitizer \
            --out "$OUT/executor_gpu_smoke.md"
        rm -f "$OUT/executor_gpu_smoke.csv" "$OUT/executor_gpu_smoke.json"   # 8 files come back per call at most
        ;;
    vs_torch)
        bounded "$PY" -m benchmarks.vs_torch --measured-only --only "$VT_ONLY" "${VT[@]}" \
            ${HYBRID_SECONDS:+--hybrid-seconds "$HYBRID_SECONDS"} \
            --alternatives eager,checkpoint,save_on_cpu,checkpoint+save_on_cpu
        keep "results/vs_torch_measured$Q.md" "results/vs_torch_measured$Q.csv"
        ;;
    executor)
        # this run's models replace theirs in the committed table, its other rows (and the sanitizer's) staying,
        # where that table was measured on this card (its Device line); else this run's rows make a table alone
        bounded "$PY" -m benchmarks.executor_gpu "${EG[@]}" "${EX_MODELS[@]}" --ga-seconds "${GA_SECONDS:-30}" \
            --no-sanitizer --append --previous "$(previous_executor_table)" --out "$OUT/executor_gpu.md"
        ;;
    sanitizer)
        [ "$DEV" = cpu ] && { echo "the sanitizer needs CUDA: skipped" | tee -a "$LOG"; return 0; }
        bounded "$PY" -m benchmarks.executor_gpu --sanitizer-only --append --previous "$(previous_executor_table)" \
            --out "$OUT/executor_gpu.md"
        ;;
    compile)
        bounded "$PY" -m benchmarks.vs_torch --measured-only --only "$CM_ONLY" "${VT[@]}" --hybrid-at all \
            --alternatives compile_budget_0.5,compile_budget_0.2 --table vs_torch_measured_compile
        keep "results/vs_torch_measured_compile$Q.md" "results/vs_torch_measured_compile$Q.csv"
        ;;
    *)
        echo "error: unknown stage '$stage' (preflight, smoke, vs_torch, executor, compile, sanitizer)" \
            | tee -a "$LOG"
        return 2
        ;;
    esac
    echo "=== $stage ended ($(date -u +%H:%M:%S))" | tee -a "$LOG"
}

for stage in "$@"; do
    run_stage "$stage"
done
ls -l "$OUT" | tee -a "$LOG"
