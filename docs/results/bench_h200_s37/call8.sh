#!/usr/bin/env bash
# Session 37, call 8 (one H200): the row tiling capped at 32 registers (LaunchConfig.maxnreg), against the default
# (40 registers without positions, 37 with: 6 programs of 8 warps an SM, where 32 lets 8 share it, as triton_v2's
# 32 do; scripts/kernel_vectors-style static counts, sm_90, triton 3.6). Head dims on rows, then packed sequences
# (positions: call 7's triton_v4 93-94.5% of copy against triton_v2's 97-99).
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call8; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 75 python -m scripts.bench_rope --budget-s 65 --packed --no-compiled \
  --ropes triton_v4,triton_v4@regs=32,triton_v2 --out $R/packed > $R/packed.log 2>&1
echo "packed exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| [0-9]" $R/packed/packed.md | cut -c1-200
timeout 80 python -m scripts.bench_rope --budget-s 70 --head-dims --variant full --head-dim-list 48,64,128,96 \
  --no-compiled --ropes triton_v4,triton_v4@regs=32,triton_v2 --out $R/rows > $R/rows.log 2>&1
echo "rows exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| [0-9]" $R/rows/headdim_32M.md | cut -c1-300
cd $R && tar czf ../call8.tgz . && cd .. && rm -rf call8
