#!/usr/bin/env bash
# Session 13, call 4: larger flat programs at odd halves (variant=full), split and paired tables: does a program
# spanning more of a token's heads (fewer table reads from L2 per element) help at large D?
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
R=triton_v4@split,triton_v4@paired,triton_v4@split+tile=2048+warps=8,triton_v4@paired+tile=2048+warps=8,triton_v4@split+tile=4096+warps=8,triton_v4@paired+tile=4096+warps=8,triton_v4@paired+tile=2048+warps=4
for round in 1 2; do
timeout 250 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,66,98,130,170,210,254 --ropes $R --no-liger --no-compiled --out $OUT/big$round > $OUT/big$round.log 2>&1
grep -E "D=.*fwd" $OUT/big$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed 's/fwd\/bwd % copy  //; s/triton_v4@//g'
echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz big1 big2 && rm -rf big1 big2
