#!/usr/bin/env bash
# Session 26, call 4: the report at --flush steady: head-dim sweep, variant full, D = 138 ... 256, --placements 3,
# beside Liger and compiled torch; then layouts and rotary_dim, packed sequences and the host overheads.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 390 python -m scripts.bench_rope --budget-s 380 --variant full --head-dims --head-dim-list $(seq -s, 138 2 256) \
  --ropes triton_v4 --placements 3 --flush steady --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
head -1 $OUT/r/full.log | cut -c1-200; tail -n 3 $OUT/r/full.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 588 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 575 - $(date +%s) + T0 )) --layouts --packed --overhead --placements 3 \
  --ropes triton_v4,triton_v2 --flush steady --out $OUT/r/modes > $OUT/r/modes.log 2>&1
grep -vE "^\s*$" $OUT/r/modes.log | grep -v "^\[" | cut -c1-300 | tail -n 70
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
