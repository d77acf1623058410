#!/usr/bin/env bash
# Session 26, call 3: the Timer's steady flush checked against a stream of calls (flush_modes.py), then the report's
# head-dim sweep, variant full, D = 16 ... 136, --flush steady --placements 3, beside Liger and compiled torch.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 150 python .devrun/s26/flush_modes.py 38,54,56,114,128,206 > $OUT/r/flush_modes.txt 2>&1; cat $OUT/r/flush_modes.txt
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full --head-dims --head-dim-list $(seq -s, 16 2 136) \
  --ropes triton_v4 --placements 3 --flush steady --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
head -1 $OUT/r/full.log | cut -c1-200; tail -n 3 $OUT/r/full.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
