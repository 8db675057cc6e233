#!/usr/bin/env bash
# The parsing recipe on a lent GPU (issue 14: "the same recipe on one GPU in under 10 minutes"):
#   1. recipes/gum-parse.toml as shipped, on the GPU (bf16 autocast there), with train.max_minutes = MINUTES as its
#      budget (the recipe's 60 is the CPU's; lr_clock lets the rate reach 0 at the budget if max_steps does not come
#      first), wall clock from the command's start to the averaged weights;
#   2. the averaged weights parse all of GUM dev on the GPU, beam 21 (the recipe's) and greedy, scored as on the CPU
#      (COLLINS.prm + ROOT, strict; gold tags put back, and predicted tags), each timed.
#   TRANSDUCE_DATA=$PWD/.gpudata OUT=/tmp/out [MINUTES=10] bash benchmarks/gpu_parse.sh
# benchmarks/gpu_pair.sh starts it after its training step when PARSE_MINUTES is set. DEVICE=cpu and SMOKE=1 (a few
# updates of a tiny model) try the script on a machine without a GPU.
# Run once so far, from gpu_pair.sh on one H200 (2026-11-26, MINUTES=4): BENCHMARKS.md, parsing, twenty-fourth run.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/out/gpu-parse}
DEVICE=${DEVICE:-cuda}
MINUTES=${MINUTES:-10}
PY=${PYTHON:-python3}
W=/tmp/gpu-parse-$(date +%s)
mkdir -p "$OUT" "$W"
SMOKE_SETS=()
if [ -n "${SMOKE:-}" ]; then
  SMOKE_SETS=(--set train.max_steps=20 --set train.valid_every=10 --set train.save_every=10 --set train.warmup_steps=5
    --set model.n_layers=1 --set model.d_model=64 --set model.d_ff=128 --set data.vocab_size=1000
    --set train.valid_max_sentences=5)
fi
now() { date +%s.%N; }
since() { $PY -c "import sys; print(round($(now) - $1, 1))"; }
S="$OUT/parse-summary.txt"
echo "gum-parse on $DEVICE, train.max_minutes=$MINUTES, from $(date -u +%H:%M:%S)" > "$S"
t=$(now)
timeout $((MINUTES * 60 + 120)) $PY -m transduce train gum-parse --out "$W/run" --set train.device="$DEVICE" \
  --set train.max_minutes="$MINUTES" "${SMOKE_SETS[@]}" > "$W/train.log" 2>&1
echo "training: exit $?, wall $(since "$t") s (data preparation and averaging included)" >> "$S"
grep -h "finished\|averaged\|Error\|error" "$W/train.log" | tail -3 >> "$S"
tr '\r' '\n' < "$W/train.log" | grep "valid_nll" | tail -2 >> "$S"
for beam in 21 1; do
  t=$(now)
  timeout 150 $PY -m transduce parse "$W/run/averaged.safetensors" --words-from-gold --gold gum_const/dev.trees \
    --scores-only --beam $beam --device "$DEVICE" --quiet > "$OUT/parse-dev-beam$beam.txt" 2>&1
  echo "dev, beam $beam: exit $?, $(since "$t") s (start-up and model loading included)" >> "$S"
  head -6 "$OUT/parse-dev-beam$beam.txt" >> "$S"
done
cp "$W/train.log" "$OUT/parse-train.log" 2>/dev/null
cp "$W/run/metrics.jsonl" "$OUT/parse-metrics.jsonl" 2>/dev/null
date -u +"ended %H:%M:%S" >> "$S"
