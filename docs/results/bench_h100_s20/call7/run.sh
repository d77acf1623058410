#!/usr/bin/env bash
# Session 20, call 7 (session 18 report call A again, at the code session 19 ended with): the head-dim sweep, variant full, every even D from 16 to 256, 32M elements a tensor:
# triton_v4 beside Liger-Kernel and the compiled PyTorch reference, forward and backward.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 575 python -m scripts.bench_rope --budget-s 560 --variant full --head-dims --head-dim-list every \
  --ropes triton_v4 --out $OUT/r/full32 > $OUT/r/full32.log 2>&1
grep -E "D=.*fwd" $OUT/r/full32.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 3 $OUT/r/full32.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
