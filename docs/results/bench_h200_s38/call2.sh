#!/usr/bin/env bash
# Session 38, call 2 (call 1's H200): report13's part c in smoke mode, then session 37's register cap on a second
# H200 and at the padded rows it took untimed (D = 112, 192, 208, 224, 240): triton_v4 as shipped (capped at 32
# there) beside triton_v4@regs=255 (the compiler's own count) and Liger, 32M elements, both variants.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
T0=$(date +%s)
REPORT13_SMOKE=1 bash docs/results/report13/run.sh c; echo "part c at $(( $(date +%s) - T0 )) s"
R=$OUT/call2; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
for v in full partial; do
  left=$(( 560 - $(date +%s) + T0 )); [ $v = full ] && left=$(( left / 2 ))
  timeout $left python -m scripts.bench_rope --budget-s $(( left - 15 )) --head-dims --variant $v --no-compiled \
    --ropes triton_v4,triton_v4@regs=255 --head-dim-list 48,96,112,192,208,224,240 --out $R/cap_$v > $R/cap_$v.log 2>&1
  echo "cap $v exit $? at $(( $(date +%s) - T0 )) s"; tail -n 16 $R/cap_$v.log | cut -c1-300
done
cd $R && tar czf ../call2.tgz . && cd - > /dev/null && rm -rf $R
