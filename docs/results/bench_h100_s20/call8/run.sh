#!/usr/bin/env bash
# Session 20, call 8 (session 18 report call B again, same machine as call 7): the head-dim sweep, variant partial, every multiple of 4 from 16 to 256, 32M elements
# (triton_v4, Liger, compiled torch); layouts and rotary_dim, packed sequences, host overhead at tiny shapes.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 300 python -m scripts.bench_rope --budget-s 290 --variant partial --head-dims --head-dim-list every \
  --ropes triton_v4 --out $OUT/r/part32 > $OUT/r/part32.log 2>&1
grep -E "D=.*fwd" $OUT/r/part32.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 575 - $(date +%s) + T0 )) --layouts --packed \
  --overhead --ropes triton_v4,triton_v2 --out $OUT/r/modes > $OUT/r/modes.log 2>&1
grep -vE "^\s*$" $OUT/r/modes.log | grep -v "^\[" | cut -c1-400 | tail -n 60
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
