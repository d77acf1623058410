#!/usr/bin/env bash
# Session 20, call 5: does less L2 read traffic lift the odd halves? (ncu, call 3: L2 throughput 85-90% for the joint
# odd halves against 82.5% for rows; their L2 reads +15-37%: the element-table rows each program reads and partner
# runs across program boundaries). Position-major token order (order=1: a program's tokens share a table row),
# programs of 2048 elements on 4 warps (two blocks a thread: half the boundaries, table rows per element), both.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
M="triton_v4,triton_v4@order=1,triton_v4@tile=2048+warps=4,triton_v4@order=1+tile=2048+warps=4"
timeout 400 python -m scripts.bench_rope --budget-s 390 --head-dims --variant full \
  --head-dim-list 54,70,114,134,154,198,230,254,22 --ropes "$M" --no-compiled --no-liger \
  --out $OUT/r/odd > $OUT/r/odd.log 2>&1
show $OUT/r/odd.log odd; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 570 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 560 - $(date +%s) + T0 )) --head-dims --variant partial \
  --head-dim-list 68,100,40,104 --ropes "triton_v4,triton_v4@order=1" --no-compiled --no-liger \
  --out $OUT/r/even > $OUT/r/even.log 2>&1
show $OUT/r/even.log even; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
