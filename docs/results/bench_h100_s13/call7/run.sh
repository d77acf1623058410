#!/usr/bin/env bash
# Session 13, call 7 (closing run, part 2): the head-dim sweep of variant=full at every even head dim from 16 to
# 256 at 32M (beside Liger and compiled torch), and its odd halves (D = 2 mod 4) at 256M (beside Liger).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 420 python -m scripts.bench_rope --variant full --head-dims --head-dim-list every --ropes triton_v4 --out $OUT/r/full32 > $OUT/r/full32.log 2>&1
grep -E "D=.*fwd" $OUT/r/full32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
ODD=$(python -c "print(','.join(str(d) for d in range(18, 257, 4)))")
timeout 140 python -m scripts.bench_rope --variant full --head-dims --head-dim-list $ODD --elements 256M --ropes triton_v4 --no-compiled --out $OUT/r/full256 > $OUT/r/full256.log 2>&1
grep -E "D=.*fwd" $OUT/r/full256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
