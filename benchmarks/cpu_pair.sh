#!/usr/bin/env bash
# recipes/multi30k-bf16-pair.toml on this CPU (issue 52: a time-boxed recipe keeps its promise on any CPU): both
# members trained, then decoded together (beam 4, alpha 1.0: the recipe's) on all of validation and on
# test_2016_flickr; each member's log keeps its precision pick and its forecast line. Figures: BENCHMARKS.md, "A
# time-boxed recipe on a slower CPU".
#   TRANSDUCE_DATA=../shared/data MODE=side-by-side bash benchmarks/cpu_pair.sh
# MODE=side-by-side: the recipe as shipped: both members at once, one thread and the whole hour each
#   (train.max_minutes=60); on 2 cores one thread per run wastes less than two threads on one small model, and each
#   run's validations and saves overlap the other's training.
# MODE=one-core: the same, both pinned to one core (taskset, CORE, default 0): a CPU with half the cores.
# MODE=one-member: seed 1 alone, one thread, 60 min, pinned to CORE: what a one-core CPU gets from one member
#   instead of two; decoded alone. One-core and one-member can run at once on CORE=0 and CORE=1.
# MODE=competing: the recipe as shipped (members not pinned) while a busy loop holds CORE: a CPU that is also doing
#   something else; the load stops when training ends.
# MODE=competing-member: the same load, seed 1 alone (not pinned, one thread, 60 min), decoded alone: the one-core
#   advice on such a CPU.
# MODE=sequential (the recipe before 2026-11-28): seed 1, then seed 2, each with 2 threads and 30 minutes.
# MODE=one-thread (the same, on a slowed CPU): each member on one thread for 30 minutes, the two side by side.
# SET: extra key=value overrides for each member of the 60-minute modes, space-separated (SET="train.peak_lr=0.004").
# OUT (default benchmarks/out/cpu-pair-MODE) receives the runs' logs and the scores; the runs stay in /tmp.
set -eu
MODE=${MODE:-side-by-side}
OUT=${OUT:-benchmarks/out/cpu-pair-$MODE}
PY=${PYTHON:-.venv/bin/python}
CORE=${CORE:-0}
W=/tmp/cpu-pair-$MODE-$(date +%s)-$$
mkdir -p "$OUT" "$W"
train() {  # seed, extra --set arguments
  local seed=$1
  shift
  $PY -m transduce train multi30k-bf16-pair --out "$W/s$seed" --set train.seed="$seed" "$@" 2>"$OUT/train-s$seed.err"
  cp "$W/s$seed/train.log" "$OUT/train-s$seed.log"
}
together() {  # both members at once, each with the given --set arguments
  train 1 "$@" &
  local p1=$!
  train 2 "$@" &
  local p2=$!
  wait $p1 && wait $p2
}
LEVER=()
for kv in ${SET:-}; do LEVER+=(--set "$kv"); done
ONE_HOUR=(--set train.num_threads=1 --set train.max_minutes=60 "${LEVER[@]}")
case $MODE in
  one-core | one-member | competing | competing-member)
    taskset -c "$CORE" true || { echo "$MODE needs taskset and a core $CORE" >&2; exit 2; }
    ;;
esac
case $MODE in one-core | one-member) PY="taskset -c $CORE $PY" ;; esac
start=$(date +%s)
case $MODE in
  sequential) train 1 --set train.num_threads=2 --set train.max_minutes=30 && train 2 --set train.num_threads=2 --set train.max_minutes=30 ;;
  one-thread) together --set train.num_threads=1 --set train.max_minutes=30 ;;
  side-by-side | one-core) together "${ONE_HOUR[@]}" ;;
  one-member) train 1 "${ONE_HOUR[@]}" ;;
  competing | competing-member)
    taskset -c "$CORE" sh -c 'while :; do :; done' &
    load=$!
    trap 'kill $load 2>/dev/null' EXIT
    if [ "$MODE" = competing ]; then together "${ONE_HOUR[@]}"; else train 1 "${ONE_HOUR[@]}"; fi
    kill $load
    ;;
  *) echo "MODE must be side-by-side, one-core, one-member, competing, competing-member, sequential or one-thread, got '$MODE'" >&2; exit 2 ;;
esac
echo "training wall clock: $(( $(date +%s) - start )) s" | tee "$OUT/wall.txt"
ENSEMBLE=()  # the one-member modes train seed 1 alone and decode it alone
[ -d "$W/s2" ] && ENSEMBLE=(--ensemble "$W/s2/averaged.safetensors")
for split in val test_2016_flickr; do
  $PY -m transduce evaluate "$W/s1/averaged.safetensors" "${ENSEMBLE[@]}" \
    --src "multi30k/$split.en.gz" --ref "multi30k/$split.de.gz" >"$OUT/$split.txt" 2>"$OUT/$split.err"
  cat "$OUT/$split.txt"
done
grep -h "precision 'auto'\|updates/s\|finished at" "$OUT"/train-s*.log
lscpu | grep -m1 "Model name" >"$OUT/cpu.txt"; grep -m2 -E "cpu family|^model\s" /proc/cpuinfo >>"$OUT/cpu.txt"
