#!/usr/bin/env bash
# Session 21, call 2: the flat backward with sin negated in its table (LaunchConfig.signs: the forward's code, 48
# registers at R2 = 3 mod 8 where INVERSE takes 54) against the default; full then partial, then full again in the
# reverse order.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
DL=54,70,86,134,150,182,198,230,98,114,154,206,68,100,40,18,22
timeout 250 python -m scripts.bench_rope --budget-s 240 --head-dims --variant full \
  --head-dim-list $DL --ropes "triton_v4,triton_v4@signs" --no-compiled --no-liger --out $OUT/r/p1 > $OUT/r/p1.log 2>&1
show $OUT/r/p1.log p1; echo "at $(( $(date +%s) - T0 )) s"
timeout 120 python -m scripts.bench_rope --budget-s 110 --head-dims --variant partial \
  --head-dim-list 24,36,52,56,180,232 --ropes "triton_v4,triton_v4@signs" --no-compiled --no-liger --out $OUT/r/part > $OUT/r/part.log 2>&1
show $OUT/r/part.log part; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 575 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 565 - $(date +%s) + T0 )) --head-dims --variant full \
  --head-dim-list $DL --ropes "triton_v4@signs,triton_v4" --no-compiled --no-liger --out $OUT/r/p2 > $OUT/r/p2.log 2>&1
show $OUT/r/p2.log p2; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
