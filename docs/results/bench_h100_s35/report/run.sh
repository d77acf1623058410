#!/usr/bin/env bash
# Session 35: issue #13's report from one H100, at the landed code (kernel as of session 33, 1606280), in consecutive
# calls on one warm machine: bash docs/results/bench_h100_s35/report/run.sh a|b|c|d|e
#   a: variant full, D = 16 ... 136 (every even D), 32M elements a tensor, triton_v4 beside Liger-Kernel and compiled
#      torch, each configuration timed on three input sets (--placements 3), the benchmark's default flush (zero)
#   b: the same, D = 138 ... 256
#   c: variant partial, every multiple of 4 from 16 to 256, as a; then 256M elements a tensor, variant full at the
#      odd halves D = 18, 26, ..., 250 and 254, triton_v4 beside Liger (what time is left)
#   d: layouts and rotary_dim (--placements 3), packed sequences, host overhead at tiny shapes (triton_v4, triton_v2,
#      Liger, compiled torch); the training steps: seed004 and GPT-2 small, eager and compiled, paired by round
#   e: 256M elements a tensor, variant partial at D = 16, 48, 80, ..., 240, 256, triton_v4 beside Liger
set -u
part=$1
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
case $part in
  a) sweep full_a 570 --variant full --head-dims --head-dim-list $(seq -s, 16 2 136) --ropes triton_v4 --placements 3 ;;
  b) sweep full_b 570 --variant full --head-dims --head-dim-list $(seq -s, 138 2 256) --ropes triton_v4 --placements 3 ;;
  c) sweep part 345 --variant partial --head-dims --head-dim-list every --ropes triton_v4 --placements 3
     sweep full256 $(left 340) --variant full --head-dims --elements 256M --no-compiled --ropes triton_v4 \
       --head-dim-list 18,26,34,42,50,58,66,74,82,90,98,106,114,122,130,138,146,154,162,170,178,186,194,202,210,218,226,234,242,250,254 ;;
  d) sweep modes 215 --layouts --packed --overhead --placements 3 --ropes triton_v4,triton_v2
     timeout $(left 385) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
       --iters 480 --rounds 8 --out $R/step_seed004 > $R/step_seed004.log 2>&1
     echo "== seed004 exit $? at $(( $(date +%s) - T0 )) s"; tail -n 9 $R/step_seed004.log | cut -c1-300
     timeout $(left 540) python -m scripts.bench_step --model gpt2_small --ropes none,torch,triton_v4 --no-liger \
       --iters 96 --rounds 6 --out $R/step_gpt2 > $R/step_gpt2.log 2>&1
     echo "== gpt2 exit $? at $(( $(date +%s) - T0 )) s"; tail -n 9 $R/step_gpt2.log | cut -c1-300 ;;
  e) sweep part256 300 --variant partial --head-dims --elements 256M --no-compiled --ropes triton_v4 \
       --head-dim-list 16,48,80,112,144,176,208,240,256 ;;
  *) echo "part: a, b, c, d or e"; exit 2 ;;
esac
echo "== part $part done at $(( $(date +%s) - T0 )) s"
