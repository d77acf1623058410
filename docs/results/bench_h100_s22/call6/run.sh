#!/usr/bin/env bash
# Session 22, call 6: the table by pair read as 8-byte vectors (LaunchConfig.tables=2, spec pair) against the
# default at odd halves; two passes, the second in the reverse order.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
DL=54,70,86,98,114,134,150,154,198,206,230,18,22,254
timeout 330 python -m scripts.bench_rope --budget-s 320 --head-dims --variant full --head-dim-list $DL \
  --ropes "triton_v4,triton_v4@pair" --no-compiled --no-liger --out $OUT/r/p1 > $OUT/r/p1.log 2>&1
show $OUT/r/p1.log p1; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 575 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 565 - $(date +%s) + T0 )) --head-dims --variant full \
  --head-dim-list $DL --ropes "triton_v4@pair,triton_v4" --no-compiled --no-liger --out $OUT/r/p2 > $OUT/r/p2.log 2>&1
show $OUT/r/p2.log p2; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
