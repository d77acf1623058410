#!/usr/bin/env bash
# Session 19, call 4: joint flat programs do a q block and a k block each, so their programs move twice the elements
# of apart ones: smaller programs (tile 512) and other shapes at the odd halves that recur under 93 (full D = 54, 86,
# 90, 98, 114, 154, 182, 206), at R2 = 2 mod 8 (partial 36, 100, 180, 244) and R2 = 4 mod 8 (full 40, 104, 184);
# the host-overhead mode.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
M="triton_v4,triton_v4@tile=512,triton_v4@tile=512+warps=2,triton_v4@tile=2048+warps=8"
timeout 200 python -m scripts.bench_rope --budget-s 190 --head-dims --variant full --head-dim-list 54,86,90,98,114,154,182,206 \
  --ropes "$M" --no-compiled --no-liger --out $OUT/r/odd > $OUT/r/odd.log 2>&1
show $OUT/r/odd.log odd; echo "at $(( $(date +%s) - T0 )) s"
M="triton_v4,triton_v4@tile=512,triton_v4@tile=512+warps=2"
timeout 100 python -m scripts.bench_rope --budget-s 95 --head-dims --variant partial --head-dim-list 36,100,180,244 \
  --ropes "$M" --no-compiled --no-liger --out $OUT/r/r2 > $OUT/r/r2.log 2>&1
show $OUT/r/r2.log r2; echo "at $(( $(date +%s) - T0 )) s"
timeout 80 python -m scripts.bench_rope --budget-s 75 --head-dims --variant full --head-dim-list 40,104,184 \
  --ropes "$M" --no-compiled --no-liger --out $OUT/r/r4 > $OUT/r/r4.log 2>&1
show $OUT/r/r4.log r4; echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 580 - $(date +%s) + T0 )) python -m scripts.bench_rope --overhead --ropes triton_v4 --no-compiled --no-liger \
  --out $OUT/r/oh > $OUT/r/oh.log 2>&1
grep -vE "^\s*$" $OUT/r/oh.log | tail -25; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
