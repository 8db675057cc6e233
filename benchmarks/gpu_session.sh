#!/usr/bin/env bash
# Figures: BENCHMARKS.md, "GPU"; the sweeps behind the recipes: docs/experiments.md.
# One call on a lent GPU machine (issues 16 and 17): the CUDA checks against the CPU path (`pytest -m cuda`) and,
# beside them on the same GPU and CPUs, benchmarks/gpu_sweep.py with the arguments given here.
#   TRANSDUCE_DATA=... OUT=... bash benchmarks/gpu_session.sh --seeds 1 2 3 --candidate recipe= ...
# Run from the repository root with TRANSDUCE_DATA set (a copy of multi30k/) and OUT a folder for the results.
# SKIP_PYTEST=1 leaves the checks out; SWEEP_TIMEOUT (seconds, default 470) bounds the sweep.
#
# The three calls of 2026-11-26 (BENCHMARKS.md, issue 17) ran earlier forms of this script:
#   1. sweep arguments fixed in the script: --seeds 1 2 3 --parallel 12 --all train.max_minutes=5.5 --candidate
#      recipe= --candidate wd=train.weight_decay=0.0001 --candidate wd3=train.weight_decay=0.0003 --candidate
#      e4d2=model.n_encoder_layers=4,model.n_decoder_layers=2 --test recipe --test-best, into /tmp/gpu-sweep;
#   2. the arguments passed through: --precision fp32 --candidate recipe= --candidate wd=train.weight_decay=0.0001
#      --candidate wd05=train.weight_decay=0.00005 --candidate wdlr3=train.weight_decay=0.0001,train.peak_lr=0.003
#      --test recipe --test-best; the machine was still warm, so /tmp/gpu-sweep held the first call's runs and
#      `recipe` and `wd` were resumed, found finished and reported again (bf16): gpu_sweep.py now refuses that;
#   3. a fresh folder per call, SKIP_PYTEST=1 SWEEP_TIMEOUT=250, --precision fp32 --all train.max_minutes=3.9
#      --candidate r32= --candidate wd32=train.weight_decay=0.0001 --candidate lr3-32=train.peak_lr=0.003
#      --candidate wdlr3bf=train.weight_decay=0.0001,train.peak_lr=0.003,train.precision=bf16.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/out/gpu}
W=/tmp/gpu-sweep-$(date +%s)  # a fresh folder per call: a warm machine keeps /tmp
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  echo "cpus $(nproc)"; date -u
} > "$OUT/gpu.txt" 2>&1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 10 > "$OUT/util.csv" 2>&1 &
UTIL=$!
timeout "${SWEEP_TIMEOUT:-470}" python3 benchmarks/gpu_sweep.py --out "$W" --parallel 12 --all train.max_minutes=5.5 "$@" \
  > "$OUT/sweep.txt" 2>&1 &
SWEEP=$!
if [ -z "${SKIP_PYTEST:-}" ]; then
  sleep 10
  timeout 200 python3 -m pytest -m cuda -p no:cacheprovider -q -rs tests/test_cuda.py tests/test_constraints.py \
    > "$OUT/pytest.txt" 2>&1
  echo "pytest exit $?" >> "$OUT/pytest.txt"
fi
wait $SWEEP
echo "sweep exit $?" >> "$OUT/sweep.txt"
kill $UTIL 2>/dev/null
date -u >> "$OUT/gpu.txt"
tar czf "$OUT/runs.tgz" -C "$W" --exclude='*.safetensors' --exclude=checkpoints --exclude=data .
best=$(python3 -c "import json; print(json.load(open('$W/summary.json'))['best_weights'])" 2>/dev/null)
[ -n "$best" ] && split -b 15M "$best" "$OUT/best-weights.part-"  # fp32 weights: over one file's 16 MiB
tail -25 "$OUT/sweep.txt"; tail -15 "$OUT/pytest.txt" 2>/dev/null
