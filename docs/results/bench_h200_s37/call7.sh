#!/usr/bin/env bash
# Session 37, call 7 (one H200): packed sequences (D = 128, rows) with launch settings beside the defaults: in call 3
# triton_v4 with positions read 92.4% of copy against 95.9 without and triton_v2's 96.5 with them.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call7; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
timeout 200 python -m scripts.bench_rope --budget-s 185 --packed --no-compiled \
  --ropes triton_v4,triton_v2,triton_v4@tile=1024,triton_v4@tile=4096,triton_v4@chunks,triton_v4@flat \
  --out $R/packed > $R/packed.log 2>&1
echo "packed exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^\| [0-9]" $R/packed/packed.md | cut -c1-200
cd $R && tar czf ../call7.tgz . && cd .. && rm -rf call7
