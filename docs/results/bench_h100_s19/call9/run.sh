#!/usr/bin/env bash
# Session 19, call 9: the odd halves at R2 = 3 mod 8, whose backward compiles to 54 registers a thread (48 forward;
# triton 3.6, sm_90), with a register cap of 48 or 40 (LaunchConfig.maxnreg); R2 = 5 mod 8 at D = 154 beside.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
M="triton_v4,triton_v4@regs=48,triton_v4@regs=40"
timeout 280 python -m scripts.bench_rope --budget-s 270 --head-dims --variant full \
  --head-dim-list 54,70,86,102,118,134,150,166,182,198,214,230,246,154 --ropes "$M" --no-compiled --no-liger \
  --out $OUT/r/r3 > $OUT/r/r3.log 2>&1
show $OUT/r/r3.log r3; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
