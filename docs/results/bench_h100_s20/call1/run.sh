#!/usr/bin/env bash
# Session 20, call 1: LaunchConfig.share (one table load for a block of each of SH head groups) against the default,
# at the odd halves (variant=full, D = 2 mod 4, joint from D = 54) and at the other flat geometries.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
M="triton_v4,triton_v4@share=2,triton_v4@share=4"
timeout 330 python -m scripts.bench_rope --budget-s 320 --head-dims --variant full \
  --head-dim-list 54,70,86,90,98,114,134,150,154,182,198,206,214,230,254,18 --ropes "$M" --no-compiled --no-liger \
  --out $OUT/r/odd > $OUT/r/odd.log 2>&1
show $OUT/r/odd.log odd; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 570 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 560 - $(date +%s) + T0 )) --head-dims --variant partial \
  --head-dim-list 36,68,100,244,40,104,184,28,60,92 --ropes "$M" --no-compiled --no-liger \
  --out $OUT/r/even > $OUT/r/even.log 2>&1
show $OUT/r/even.log even; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
