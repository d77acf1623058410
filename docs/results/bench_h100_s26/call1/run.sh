#!/usr/bin/env bash
# Session 26, call 1: the L2 flush's dirty lines. flush_probe.py (copy and triton_v4 forward after each flush), then
# the 32M head-dim sweep, every odd half and rows 48, 64, 128, --placements 3, beside Liger, with --flush read; and a
# subset with the default --flush zero on the same machine.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
timeout 90 python .devrun/s26/flush_probe.py > $OUT/r/flush_probe.txt 2>&1; cat $OUT/r/flush_probe.txt
echo "at $(( $(date +%s) - T0 )) s"
SUB=48,54,64,86,98,114,128,154,206,230
timeout 120 python -m scripts.bench_rope --variant full --head-dims --head-dim-list $SUB \
  --ropes triton_v4 --no-compiled --placements 3 --flush zero --out $OUT/r/zero > $OUT/r/zero.log 2>&1
grep -E "D=.*fwd" $OUT/r/zero.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
head -1 $OUT/r/zero.log | cut -c1-200
echo "at $(( $(date +%s) - T0 )) s"
DL=48,64,128,$(seq -s, 18 4 254)
timeout $(( 570 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 550 - $(date +%s) + T0 )) --variant full --head-dims --head-dim-list $DL \
  --ropes triton_v4 --no-compiled --placements 3 --flush read --out $OUT/r/read > $OUT/r/read.log 2>&1
head -1 $OUT/r/read.log | cut -c1-200
grep -E "D=.*fwd" $OUT/r/read.log | sed 's/.*D=/D=/; s/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | awk '{printf "%s ", $0; if (NR%2==0) print ""}'
tail -n 3 $OUT/r/read.log | cut -c1-300
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
