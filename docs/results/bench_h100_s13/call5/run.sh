#!/usr/bin/env bash
# Session 13, call 5: a register cap of 32 a thread (maxnreg; full occupancy) against the compiler's own choice,
# two rounds: odd halves (variant=full), the flat partial dims, the chunk/row near misses.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
R=triton_v4,triton_v4@regs=32
for round in 1 2; do
timeout 120 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,26,30,66,98,130,170,210,254 --ropes $R --no-liger --no-compiled --out $OUT/full$round > $OUT/full$round.log 2>&1
grep -E "D=.*fwd" $OUT/full$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed 's/fwd\/bwd % copy  //; s/triton_v4@//g'
timeout 120 python -m scripts.bench_rope --head-dims --head-dim-list 20,28,36,52,68,252,24,40,48,56,88,104,152,184 --ropes $R --no-liger --no-compiled --out $OUT/hd$round > $OUT/hd$round.log 2>&1
grep -E "D=.*fwd" $OUT/hd$round.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed 's/fwd\/bwd % copy  //; s/triton_v4@//g'
echo "at $(( $(date +%s) - T0 )) s"
done
cd $OUT && tar czf res.tgz full1 full2 hd1 hd2 && rm -rf full1 full2 hd1 hd2 && mkdir logs && mv *.log logs/ && tar czf logs.tgz logs && rm -rf logs
