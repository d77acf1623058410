#!/usr/bin/env bash
# Session 14, call 1: partner runs read as int32 words (LaunchConfig.words) against 16-bit elements, and words
# under a 32-register cap: the partial R2 = 2 mod 8 family (D = 20, 36, 52, 68, 100, 148, 212; controls 28, 44 at
# R2 = 6 mod 8) and variant=full odd halves, two rounds, side by side in each run.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
P="--head-dims --no-liger --no-compiled"
for round in 1 2; do
  timeout 140 python -m scripts.bench_rope $P --head-dim-list 20,28,36,44,52,68,100,148,212 \
    --ropes triton_v4@elements,triton_v4@words,triton_v4@words+regs=32 --out $OUT/r/part_$round > $OUT/r/part_$round.log 2>&1
  grep -E "D=.*fwd" $OUT/r/part_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/p$round /"
  echo "at $(( $(date +%s) - T0 )) s"
  timeout 130 python -m scripts.bench_rope $P --variant full --head-dim-list 18,22,26,30,66,70,130,186,210,254 \
    --ropes triton_v4@elements,triton_v4@words --out $OUT/r/full_$round > $OUT/r/full_$round.log 2>&1
  grep -E "D=.*fwd" $OUT/r/full_$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/f$round /"
  echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz r && rm -rf r
