#!/usr/bin/env bash
# Session 37, call 2 (one H200): launch settings at the H200's weakest variant-full head dims of call 1 (the flat
# tiling, R2 = 2 mod 4: D = 156, 172, 204, 252; joint: 164, 244) and the rows it ties Liger at (160, 192), beside Liger.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call2; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 330 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 156,172,204,252,164,244 --no-compiled \
  --ropes triton_v4,triton_v4@joint,triton_v4@apart,triton_v4@chunks,triton_v4@rows,triton_v4@flat+warps=8,triton_v4@flat+tile=2048 \
  --out $R/flat > $R/flat.log 2>&1
echo "flat exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| (D|[0-9])" $R/flat/headdim_32M.md | cut -c1-400
timeout 150 python -m scripts.bench_rope --head-dims --variant full --head-dim-list 160,192,224 --no-compiled \
  --ropes triton_v4,triton_v4@rows,triton_v4@chunks,triton_v4@flat,triton_v4@rows+warps=4 --out $R/rows > $R/rows.log 2>&1
echo "rows exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| (D|[0-9])" $R/rows/headdim_32M.md | cut -c1-400
cd $R && tar czf ../call2.tgz . && cd .. && rm -rf call2
