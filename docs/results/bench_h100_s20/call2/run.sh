#!/usr/bin/env bash
# Session 20, call 2: LaunchConfig.share=2 written with every load before the stores (call 1's loop stored group 0
# before loading group 1), with and without a cap of 64 registers; streaming loads; against the default.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
M="triton_v4,triton_v4@share=2,triton_v4@share=2+regs=64,triton_v4@stream"
timeout 340 python -m scripts.bench_rope --budget-s 330 --head-dims --variant full \
  --head-dim-list 54,70,114,134,154,198,206,230,18,22 --ropes "$M" --no-compiled --no-liger \
  --out $OUT/r/odd > $OUT/r/odd.log 2>&1
show $OUT/r/odd.log odd; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 575 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 565 - $(date +%s) + T0 )) --head-dims --variant partial \
  --head-dim-list 68,100,40,104,28,60 --ropes "triton_v4,triton_v4@share=2,triton_v4@share=2+regs=64" --no-compiled --no-liger \
  --out $OUT/r/even > $OUT/r/even.log 2>&1
show $OUT/r/even.log even; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
