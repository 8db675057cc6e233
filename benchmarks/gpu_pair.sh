#!/usr/bin/env bash
# Figures: BENCHMARKS.md, "GPU"; the sweeps behind the recipes: docs/experiments.md.
# One call on a lent GPU (issues 16 and 17), each step timed and alone on the card unless said:
#   1. recipes/multi30k-bf16-pair.toml as shipped: seeds 1 and 2 (1..MEMBERS) trained side by side on the one GPU
#      (the issue-17 budget is 5 minutes), wall clock from the first command to the last run's end;
#   2. the first k members decoded as one ensemble (beam 4, alpha 1.0: the recipe's) on all of validation for k =
#      2..MEMBERS, the k with the best validation BLEU decoded once on test2016, and each member alone on validation,
#      while beside it `pytest -m cuda` checks the GPU path against the CPU path;
#   3. benchmarks/decode_speed.py on the first member (test2016, beam 4 and greedy);
#   4. benchmarks/train_speed.py: m30k-d256 at 4,500 tokens with cuDNN attention off (the default) and on, and
#      with train.pad_multiple = 8 (bounded shapes), then the base model at 25,000 tokens.
#   TRANSDUCE_DATA=$PWD/.gpudata OUT=/tmp/out [MEMBERS=4] [SPEED=0] [PARSE_MINUTES=M] bash benchmarks/gpu_pair.sh
# SPEED=0 leaves out steps 3 and 4; PARSE_MINUTES starts benchmarks/gpu_parse.sh (MINUTES=M) once step 1 has ended, so
# the members train alone on the card while the parser trains beside step 2, and waits for it before step 3 (the
# speed steps are measured alone). Exit status: the number of failed steps (0: all ran).
# DEVICE=cpu and SMOKE=1 (a few updates, no pytest) try the script itself on a machine without a GPU.
# Its first call (2026-11-26, one H200) hung after step 1: a bare `wait` waited for the nvidia-smi loop too (the CPU
# try-out has no nvidia-smi, so it did not show). Steps 2-4 were then run by hand on the warm machine, against the
# pair's runs in /tmp (BENCHMARKS.md gives the commands); the script now waits for its training runs only.
# Its second call (2026-11-26, one H200, MEMBERS=4 SPEED=0 PARSE_MINUTES=4) ran steps 1 and 2 and gpu_parse.sh to the
# end; steps 3 and 4 in this form (with the pad_multiple row) have run only in the CPU try-out.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/out/gpu-pair}
DEVICE=${DEVICE:-cuda}
MEMBERS=${MEMBERS:-2}  # runs of the recipe (seeds 1..MEMBERS) trained side by side; 2 = the recipe's pair
[ "$MEMBERS" -ge 2 ] || { echo "MEMBERS must be 2 or more (the recipe is an ensemble)" >&2; exit 2; }
SPEED=${SPEED:-1}
[ "$SPEED" = 0 ] || [ "$SPEED" = 1 ] || { echo "SPEED must be 0 or 1, got '$SPEED'" >&2; exit 2; }
PY=${PYTHON:-python3}
UTIL="" PARSE="" PYTEST="" FAILS=0
W=/tmp/gpu-pair-$(date +%s)  # a fresh folder per call: a warm machine keeps /tmp
mkdir -p "$OUT" "$W"
SMOKE_SETS=()
SPEED_STEPS=(400 120)
BASE=(--set model.n_layers=6 --set model.d_model=512 --set model.d_ff=2048 --set model.n_heads=8)
BASE_TOKENS=25000
if [ -n "${SMOKE:-}" ]; then
  SMOKE_SETS=(--set train.max_steps=20 --set train.valid_every=10 --set train.save_every=10 --set train.warmup_steps=5
    --set model.n_layers=1 --set model.d_model=64 --set model.d_ff=128 --set data.vocab_size=1000)
  SPEED_STEPS=(40 40)
  BASE=(--set model.n_layers=1 --set model.d_model=64 --set model.d_ff=128)
  BASE_TOKENS=2000
fi
now() { date +%s.%N; }
since() { $PY -c "import sys; print(round($(now) - $1, 1))"; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  $PY -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  echo "cpus $(nproc)"; date -u
} > "$OUT/summary.txt" 2>&1
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 > "$W/util.csv" 2>&1 &
  UTIL=$!
fi
trap 'pkill -TERM -P $$ 2>/dev/null' EXIT  # the logger never ends by itself; an interrupted call stops its runs too

# 1. the members, side by side
t0=$(now)
PIDS=()
for s in $(seq 1 "$MEMBERS"); do
  timeout 330 $PY -m transduce train multi30k-bf16-pair --out "$W/pair-s$s" --set train.device="$DEVICE" \
    --set train.seed=$s "${SMOKE_SETS[@]}" > "$W/train-s$s.log" 2>&1 &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do  # these runs only: a bare `wait` would also wait for the nvidia-smi loop, which never ends
  wait "$p" || FAILS=$((FAILS + 1))
done
echo "$MEMBERS runs: wall $(since "$t0") s (all of them, data preparation included)" >> "$OUT/summary.txt"
for s in $(seq 1 "$MEMBERS"); do
  grep -h "finished\|stopp\|Error\|error" "$W/train-s$s.log" | tail -3 | sed "s/^/s$s: /" >> "$OUT/summary.txt"
done

if [ -n "${PARSE_MINUTES:-}" ]; then  # the parsing recipe, beside the decoding below
  MINUTES=$PARSE_MINUTES DEVICE=$DEVICE OUT=$OUT bash benchmarks/gpu_parse.sh &
  PARSE=$!
fi

# 2. decoding, and beside it the CUDA checks
if [ -z "${SMOKE:-}" ] && [ "$DEVICE" = cuda ]; then
  timeout 220 $PY -m pytest -m cuda -p no:cacheprovider -rs tests/test_cuda.py tests/test_constraints.py \
    > "$OUT/pytest.txt" 2>&1 &
  PYTEST=$!
fi
evaluate() {  # k split: the first k members as one ensemble (k = 1: the first alone), beam 4 and alpha 1.0
  local k=$1 split=$2 t extra=()
  t=$(now)
  [ "$k" -gt 1 ] && extra=(--ensemble $(for s in $(seq 2 "$k"); do echo "$W/pair-s$s/averaged.safetensors"; done))
  timeout 120 $PY -m transduce evaluate "$W/pair-s1/averaged.safetensors" "${extra[@]}" --beam 4 --alpha 1.0 \
    --device "$DEVICE" --quiet --src "multi30k/$split.en.gz" --ref "multi30k/$split.de.gz" \
    --output "$W/$split-ens$k.de" > "$W/eval-$split-ens$k.txt" 2>&1
  echo "first $k as one, $split ($(since "$t") s): $(tr '\n' ' ' < "$W/eval-$split-ens$k.txt")" >> "$OUT/summary.txt"
}
bleu() { grep -o "^BLEU = [0-9.]*" "$1" | cut -d' ' -f3; }  # empty when the decode failed
best_k=2 best_bleu=-1
for k in $(seq 2 "$MEMBERS"); do  # how many members, chosen on validation; test decoded once, for that choice
  evaluate "$k" val
  b=$(bleu "$W/eval-val-ens$k.txt")
  [ -n "$b" ] || FAILS=$((FAILS + 1))
  if [ -n "$b" ] && $PY -c "import sys; sys.exit(0 if float('$b') > float('$best_bleu') else 1)"; then
    best_k=$k best_bleu=$b
  fi
done
echo "chosen on validation: the first $best_k members ($best_bleu)" >> "$OUT/summary.txt"
evaluate "$best_k" test_2016_flickr
for s in $(seq 1 "$MEMBERS"); do
  timeout 60 $PY -m transduce evaluate "$W/pair-s$s/averaged.safetensors" --beam 4 --alpha 1.0 --device "$DEVICE" \
    --quiet --src multi30k/val.en.gz --ref multi30k/val.de.gz > "$W/eval-val-s$s.txt" 2>&1
  echo "member s$s alone, val: $(bleu "$W/eval-val-s$s.txt")" >> "$OUT/summary.txt"
done
if [ -n "${PYTEST:-}" ]; then
  wait "$PYTEST"; rc=$?; echo "pytest exit $rc" >> "$OUT/pytest.txt"; [ "$rc" = 0 ] || FAILS=$((FAILS + 1))
  tail -4 "$OUT/pytest.txt" | sed "s/^/pytest: /" >> "$OUT/summary.txt"
fi
pack() { tar czf "$OUT/pair.tgz" -C "$W" --exclude='*.safetensors' --exclude=checkpoints --exclude=data .; }
pack  # now, in case the rest is cut short; again at the end with the speed runs' logs
wait_parse() {
  [ -n "$PARSE" ] || return 0
  wait "$PARSE"; rc=$?; echo "gpu_parse.sh exit $rc" >> "$OUT/summary.txt"; FAILS=$((FAILS + rc)); PARSE=""
  cat "$OUT/parse-summary.txt" >> "$OUT/summary.txt"
}
wait_parse  # before the speed steps, which are measured alone on the card

if [ "$SPEED" != 0 ]; then
# 3. decoding speed
timeout 90 $PY benchmarks/decode_speed.py "$W/pair-s1" --beam 4 --beam 1 --device "$DEVICE" > "$OUT/decode_speed.json" 2>&1

# 4. training speed
speed() {  # name steps max_tokens [--set ...]
  local name=$1 steps=$2 tokens=$3; shift 3
  timeout 100 $PY benchmarks/train_speed.py --device "$DEVICE" --steps "$steps" --max-tokens "$tokens" --skip 2 \
    --name "$name" --out "$W/speed-$name" "$@" > "$OUT/speed-$name.json" 2>&1
}
speed d256-cudnn-off "${SPEED_STEPS[0]}" 4500
speed d256-cudnn-on "${SPEED_STEPS[0]}" 4500 --set train.cudnn_attention=true
speed d256-pad8 "${SPEED_STEPS[0]}" 4500 --set train.pad_multiple=8
speed base-25k "${SPEED_STEPS[1]}" "$BASE_TOKENS" "${BASE[@]}"
fi
date -u >> "$OUT/summary.txt"
echo "$FAILS failed steps" >> "$OUT/summary.txt"
[ -n "$UTIL" ] && kill "$UTIL"
pack
cat "$OUT/summary.txt"
for f in "$OUT"/decode_speed.json "$OUT"/speed-*.json; do [ -f "$f" ] || continue; echo "== $f"; tr -d ' \n' < "$f" | cut -c1-900; echo; done
exit "$FAILS"
