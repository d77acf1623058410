#!/usr/bin/env bash
# Session 19, call 5: the R2 = 4 mod 8 family (D = 24, 40, ..., 248) at the new default beside Liger and compiled
# torch, both variants, 32M and 256M (the report's rows for the geometry that changed); odd halves at R2 mod 8 = 3, 5
# with words, split tables, blocks of 4.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
L=24,40,56,72,88,104,120,136,152,168,184,200,216,232,248
for v in full partial; do
  timeout 150 python -m scripts.bench_rope --budget-s 140 --head-dims --variant $v --head-dim-list $L --ropes triton_v4 \
    --out $OUT/r/r4_32M_$v > $OUT/r/r4_32M_$v.log 2>&1
  show $OUT/r/r4_32M_$v.log "32M $v"; echo "at $(( $(date +%s) - T0 )) s"
done
for v in full partial; do
  timeout 80 python -m scripts.bench_rope --budget-s 75 --head-dims --variant $v --head-dim-list $L --ropes triton_v4 \
    --elements 256M --no-compiled --out $OUT/r/r4_256M_$v > $OUT/r/r4_256M_$v.log 2>&1
  show $OUT/r/r4_256M_$v.log "256M $v"; echo "at $(( $(date +%s) - T0 )) s"
done
M="triton_v4,triton_v4@words,triton_v4@split,triton_v4@block=4"
timeout $(( 580 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --head-dims --variant full \
  --head-dim-list 54,70,86,102,154,186 --ropes "$M" --no-compiled --no-liger --out $OUT/r/odd35 > $OUT/r/odd35.log 2>&1
show $OUT/r/odd35.log odd35; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
