#!/usr/bin/env bash
# Issue #13's report from one H100 in three consecutive calls (about 25 minutes of device time with the machine's
# start, inside a session's 30): bash docs/results/report13/run.sh a|b|c, then
# python docs/results/report13/collect.py DIR on the parts' folders for the closing note's tables.
#   a: variant full, every even D = 16 ... 256, 32M elements a tensor, triton_v4 beside Liger-Kernel and compiled torch,
#      each configuration on two input sets (--placements 2), the benchmark's default flush (zero)
#   b: variant partial, every D = 16 ... 256 the variant takes, as a; then 256M elements, triton_v4 beside Liger:
#      variant full at 16 odd halves and D = 48, 64, 128, 256, variant partial at 9 head dims
#   c: layouts and rotary_dim, packed sequences and host overhead at tiny shapes (triton_v4, triton_v2, Liger,
#      compiled torch; --placements 2); the training steps, paired by round: seed004 compiled in 1000 rounds of 2
#      steps, seed004 eager in 8, GPT-2 small eager and compiled in 4
# Session 35's four-part script (docs/results/bench_h100_s35/report/run.sh) ran past a session's device time.
# REPORT13_SMOKE=1 runs the same commands on a few head dims and a few steps (on an H200 a and b in under 2 minutes,
# c in about 5), on any CUDA GPU, to check the script and collect.py end to end before an H100's time is spent.
set -u
part=${1:-}
case $part in a|b|c) ;; *) echo "part: a, b or c"; exit 2 ;; esac  # before the install and the GPU's first call
EVERY=every PEVERY=every FULL256=18,34,50,66,82,98,114,130,146,162,178,194,210,226,242,254,48,64,128,256
PART256=16,48,80,112,144,176,208,240,256
SEED_C=(--iters 2000 --rounds 1000) SEED_E=(--iters 240 --rounds 8) GPT2=(--iters 60 --rounds 4)
if [ -n "${REPORT13_SMOKE:-}" ]; then
  EVERY=48,54,128 PEVERY=48,52,128 FULL256=54,128 PART256=48,80
  SEED_C=(--iters 20 --rounds 10) SEED_E=(--iters 8 --rounds 2) GPT2=(--iters 4 --rounds 2)
fi
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1 || { echo "wheel install failed"; tail -5 /tmp/inst.log; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/$part; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt; git diff > $R/change.diff
left() { echo $(( $1 - $(date +%s) + T0 )); }
sweep() {  # name limit args...
  local name=$1 lim=$2; shift 2
  timeout $lim python -m scripts.bench_rope --budget-s $(( lim - 15 )) "$@" --out $R/$name > $R/$name.log 2>&1
  echo "== $name exit $? at $(( $(date +%s) - T0 )) s"; tail -n 4 $R/$name.log | cut -c1-400
}
step() {  # name limit args...: a training step's time, none/torch/triton_v4 paired by round
  local name=$1 lim=$2; shift 2
  timeout $lim python -m scripts.bench_step --ropes none,torch,triton_v4 --no-liger "$@" --out $R/step_$name \
    > $R/step_$name.log 2>&1
  echo "== $name exit $? at $(( $(date +%s) - T0 )) s"; tail -n 8 $R/step_$name.log | cut -c1-300
}
case $part in
  a) sweep full 560 --variant full --head-dims --head-dim-list $EVERY --ropes triton_v4 --placements 2 ;;
  b) sweep part 250 --variant partial --head-dims --head-dim-list $PEVERY --ropes triton_v4 --placements 2
     sweep full256 $(left 430) --variant full --head-dims --elements 256M --no-compiled --ropes triton_v4 \
       --head-dim-list $FULL256
     sweep part256 $(left 550) --variant partial --head-dims --elements 256M --no-compiled --ropes triton_v4 \
       --head-dim-list $PART256 ;;
  c) sweep modes 150 --layouts --packed --overhead --placements 2 --ropes triton_v4,triton_v2
     # point 4 is "no slower": the compiled seed004 step in 1000 rounds (8 rounds could not rank the ropes on an H200:
     # session 37, calls 3 and 4), the eager one and GPT-2 small in a few
     step seed004 $(left 340) --model seed004 --modes compile "${SEED_C[@]}"
     step seed004_eager $(left 400) --model seed004 --modes eager "${SEED_E[@]}"
     step gpt2 $(left 565) --model gpt2_small "${GPT2[@]}" ;;
esac
cd $OUT && tar czf $part.tgz $part && rm -rf $part  # one file back: the device returns 8 a call
echo "== part $part done at $(( $(date +%s) - T0 )) s"
