#!/usr/bin/env bash
# Session 38, call 3 (one H200): a register cap where session 37 did not try one on the H200. The chunk programs
# (the H200's rule for rows under 3/4 busy: D = 80, 144, 160, 176) compile to 38 registers, 32 capped with an 8-byte
# spill; the flat programs of the odd halves to 48, 40 capped with a 24-byte spill (triton 3.6, sm_90, offline).
# triton_v4 beside triton_v4@regs=32 (chunks) or @regs=40 (flat), 32M elements, zero flush, one input set.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call3; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
run() {  # name limit args...
  local name=$1 lim=$2; shift 2
  timeout $lim python -m scripts.bench_rope --budget-s $(( lim - 15 )) --head-dims --no-compiled --no-liger "$@" \
    --out $R/$name > $R/$name.log 2>&1
  echo "$name exit $? at $(( $(date +%s) - T0 )) s"; grep -A12 "^| D " $R/$name.log | head -14 | cut -c1-200
}
run chunks_full 120 --variant full --ropes triton_v4,triton_v4@regs=32 --head-dim-list 80,144,160,176
run chunks_partial 120 --variant partial --ropes triton_v4,triton_v4@regs=32 --head-dim-list 80,144,160,176
run flat_full 150 --variant full --ropes triton_v4,triton_v4@regs=40 --head-dim-list 54,114,206,238
cd $R && tar czf ../call3.tgz . && cd - > /dev/null && rm -rf $R
