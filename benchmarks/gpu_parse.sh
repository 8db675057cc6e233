#!/usr/bin/env bash
# Figures: BENCHMARKS.md, "Constituency parsing" (the GPU rows); the runs behind the recipe: docs/experiments.md.
# The parsing recipe on a lent GPU (issue 14: "the same recipe on one GPU in under 10 minutes"):
#   1. recipes/gum-parse.toml, on the GPU (bf16 autocast there), one training run per entry of RUNS, all started
#      together on the one card, with train.max_minutes = MINUTES as the budget (the recipe's 60 is the CPU's;
#      lr_clock lets the rate reach 0 at the budget if max_steps does not come first); wall clock from the launch to
#      the last run's averaged weights;
#   2. each run's averaged weights parse all of GUM dev on the GPU with beam 21 (the recipe's; the first run greedy as
#      well), then each group of ENSEMBLES decoded as one (`parse --ensemble`), scored as on the CPU (COLLINS.prm +
#      ROOT, strict; gold tags put back, and predicted tags), each timed with start-up: one decode at a time, or all
#      side by side with PARALLEL=1 (the F1 is the same; the times are then not those of a decode alone).
#   TRANSDUCE_DATA=$PWD/.gpudata OUT=/tmp/out [MINUTES=4] [SEEDS="1 2 3"] bash benchmarks/gpu_parse.sh
#   ... RUNS="r1:1 r2:2 d1:1:model.dropout=0.2 d2:2:model.dropout=0.2" ENSEMBLES="r1+r2 d1+d2" PARALLEL=1
# RUNS: NAME:SEED[:KEY=VALUE,KEY=VALUE...] each (--set overrides on top of the recipe); by default one run "sN" per
# seed of SEEDS (default "1") and, with several, ENSEMBLES = all of them as one.
# Bound on its wall clock: MINUTES * 60 + 90 s of training, then up to 150 s per decode (the device tool allows 600 s a
# call: MINUTES=4 with one seed fits beside nothing else). benchmarks/gpu_pair.sh starts it after its training step
# when PARSE_MINUTES is set. DEVICE=cpu and SMOKE=1 (20 updates of a tiny model, the first 20 dev trees, greedy only)
# try the script on a machine without a GPU. Exit status: the number of failed steps (0: all ran).
# Runs so far (BENCHMARKS.md, parsing): 2026-11-26, one H200, twenty-fourth run: seed 1 from gpu_pair.sh with
# MINUTES=4; seeds 2 and 3 and the ensemble of the three by hand, in a second call (SEEDS="1 2 3" now does it all).
# 2026-11-27, one H200, thirty-first to thirty-fourth runs: the RUNS / ENSEMBLES / PARALLEL=1 example above, MINUTES=5.
# 2026-11-27, one H200, forty-second to forty-fifth runs: the recipe beside d_model 512 (two seeds) and 1024, MINUTES=5.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/out/gpu-parse}
DEVICE=${DEVICE:-cuda}
MINUTES=${MINUTES:-4}
SEEDS=${SEEDS:-1}
PY=${PYTHON:-python3}
case "$MINUTES" in ''|*[!0-9]*) echo "MINUTES must be a whole number of minutes, got '$MINUTES'" >&2; exit 2;; esac
if [ -z "${RUNS:-}" ]; then
  RUNS="" ENS=""
  for s in $SEEDS; do RUNS="$RUNS s$s:$s"; ENS="$ENS+s$s"; done
  [ "$(echo $SEEDS | wc -w)" -gt 1 ] && ENSEMBLES=${ENSEMBLES:-${ENS#+}}
fi
ENSEMBLES=${ENSEMBLES:-}
NAMES=()
declare -A SEED SETS
for entry in $RUNS; do
  IFS=: read -r name seed sets <<< "$entry"
  case "$name:$seed" in
    *[!A-Za-z0-9_:-]*|:*|*:) echo "RUNS: '$entry' is not NAME:SEED[:KEY=VALUE,...]" >&2; exit 2;;
  esac
  case "$seed" in *[!0-9]*) echo "RUNS: '$entry': the seed must be a whole number" >&2; exit 2;; esac
  NAMES+=("$name") SEED[$name]=$seed SETS[$name]=${sets:-}
done
for group in $ENSEMBLES; do
  for name in ${group//+/ }; do
    [ -n "${SEED[$name]:-}" ] || { echo "ENSEMBLES: '$group' names '$name', which RUNS lacks" >&2; exit 2; }
  done
done
W=/tmp/gpu-parse-$(date +%s)
mkdir -p "$OUT" "$W"
SMOKE_SETS=() GOLD=gum_const/dev.trees BEAM=21 GREEDY=1  # the recipe's beam; greedy too for the first run
if [ -n "${SMOKE:-}" ]; then
  SMOKE_SETS=(--set train.max_steps=20 --set train.valid_every=10 --set train.save_every=10 --set train.warmup_steps=5
    --set model.n_layers=1 --set model.d_model=64 --set model.d_ff=128 --set data.vocab_size=1000
    --set train.valid_max_sentences=5)
  head -20 "${TRANSDUCE_DATA:-.}/gum_const/dev.trees" > "$W/dev20.trees"
  GOLD=$W/dev20.trees BEAM=1 GREEDY=""
fi
now() { date +%s.%N; }
since() { $PY -c "import sys; print(round($(now) - $1, 1))"; }
FAILS=0
S="$OUT/parse-summary.txt"
{
  echo "gum-parse on $DEVICE, runs:$RUNS, ensembles ${ENSEMBLES:-none}, train.max_minutes=$MINUTES, from $(date -u +%H:%M:%S)"
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__)"
} > "$S" 2>&1
trap 'pkill -TERM -P $$ 2>/dev/null' EXIT  # an interrupted call stops its training runs too

# 1. the runs, side by side
t=$(now)
PIDS=()
for name in "${NAMES[@]}"; do
  extra=()
  IFS=, read -ra kv <<< "${SETS[$name]}"
  for x in "${kv[@]}"; do extra+=(--set "$x"); done
  timeout $((MINUTES * 60 + 90)) $PY -m transduce train gum-parse --out "$W/run-$name" --set train.device="$DEVICE" \
    --set train.seed="${SEED[$name]}" --set train.max_minutes="$MINUTES" "${SMOKE_SETS[@]}" "${extra[@]}" \
    > "$W/train-$name.log" 2>&1 &
  PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p" || FAILS=$((FAILS + 1)); done
echo "training, ${NAMES[*]} side by side: wall $(since "$t") s (data preparation and averaging included)" >> "$S"
for name in "${NAMES[@]}"; do
  echo "$name: seed ${SEED[$name]}, --set ${SETS[$name]:-(the recipe)}" >> "$S"
  tr '\r' '\n' < "$W/train-$name.log" | grep -h "finished\|averaged\|Error\|error\|valid_nll" | tail -4 \
    | sed "s/^/$name: /" >> "$S"
  cp "$W/train-$name.log" "$OUT/parse-train-$name.log"
  cp "$W/run-$name/metrics.jsonl" "$OUT/parse-metrics-$name.jsonl" 2>/dev/null
done

# 2. dev: every run's averaged weights, then each ensemble
parse() {  # name beam weights [--ensemble more...]
  local name=$1 beam=$2 t rc=0; shift 2
  t=$(now)
  timeout 150 $PY -m transduce parse "$@" --words-from-gold --gold "$GOLD" --scores-only --beam "$beam" \
    --device "$DEVICE" --quiet > "$W/dev-$name.txt" 2>&1 || rc=1
  { echo "dev, $name: $(since "$t") s (start-up and model loading included)$([ $rc = 0 ] || echo ', FAILED')"
    head -5 "$W/dev-$name.txt" | tail -4; } > "$W/dev-$name.summary"
  return $rc
}
DECODES=() JOBS=()
for name in "${NAMES[@]}"; do DECODES+=("$name-beam$BEAM|$BEAM|$W/run-$name/averaged.safetensors"); done
[ -z "$GREEDY" ] || DECODES+=("${NAMES[0]}-beam1|1|$W/run-${NAMES[0]}/averaged.safetensors")
for group in $ENSEMBLES; do
  set -- ${group//+/ }
  first=$1; shift
  more=""
  for name in "$@"; do more="$more $W/run-$name/averaged.safetensors"; done
  DECODES+=("ensemble-${group//+/-}-beam$BEAM|$BEAM|$W/run-$first/averaged.safetensors --ensemble$more")
done
t=$(now)
for d in "${DECODES[@]}"; do
  IFS='|' read -r name beam args <<< "$d"
  if [ -n "${PARALLEL:-}" ]; then
    parse "$name" "$beam" $args &
    JOBS+=($!)
  else
    parse "$name" "$beam" $args || FAILS=$((FAILS + 1))
  fi
done
for p in "${JOBS[@]}"; do wait "$p" || FAILS=$((FAILS + 1)); done
[ -z "${PARALLEL:-}" ] || echo "decodes, all ${#DECODES[@]} side by side: wall $(since "$t") s" >> "$S"
for d in "${DECODES[@]}"; do
  name=${d%%|*}
  cat "$W/dev-$name.summary" >> "$S"
  cp "$W/dev-$name.txt" "$OUT/parse-dev-$name.txt"
done
echo "ended $(date -u +%H:%M:%S), $FAILS failed steps" >> "$S"
exit "$FAILS"
