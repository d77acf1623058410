#!/usr/bin/env bash
# Session 21, call 1: flat programs of whole head groups (LaunchConfig.heads: no partner read outside the program)
# at 1024 elements / 4 warps and 2048 / 8 warps, against the default and 2048 / 8 warps without it; two passes,
# the second in the reverse order.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
DL=54,86,98,114,150,154,206,70,134,68,100
M="triton_v4,triton_v4@heads,triton_v4@heads+tile=2048+warps=8,triton_v4@tile=2048+warps=8"
R="triton_v4@tile=2048+warps=8,triton_v4@heads+tile=2048+warps=8,triton_v4@heads,triton_v4"
timeout 300 python -m scripts.bench_rope --budget-s 290 --head-dims --variant full \
  --head-dim-list $DL --ropes "$M" --no-compiled --no-liger --out $OUT/r/p1 > $OUT/r/p1.log 2>&1
show $OUT/r/p1.log p1; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 575 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 565 - $(date +%s) + T0 )) --head-dims --variant full \
  --head-dim-list $DL --ropes "$R" --no-compiled --no-liger --out $OUT/r/p2 > $OUT/r/p2.log 2>&1
show $OUT/r/p2.log p2; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
