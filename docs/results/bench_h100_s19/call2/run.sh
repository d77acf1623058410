#!/usr/bin/env bash
# Session 19, call 2: host cost of a user kernel's launch under Inductor by argument count (launch_cost.py); the
# compiled seed004 step's host time by phase (phase_host.py); R2 = 4 mod 8 with joint programs and blocks of 4,
# again, with the paired table too.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
show() { grep -E "D=.*fwd" $1 | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //; s/triton_v4//g' | sed "s/^/$2 /"; }
timeout 120 python .devrun/s19/launch_cost.py > $OUT/r/launch_cost.txt 2>&1; tail -n 7 $OUT/r/launch_cost.txt
echo "at $(( $(date +%s) - T0 )) s"
timeout 200 python .devrun/s19/phase_host.py > $OUT/r/phase_host.txt 2>&1; tail -n 4 $OUT/r/phase_host.txt
echo "at $(( $(date +%s) - T0 )) s"
M="triton_v4,triton_v4@flat+joint+block=4,triton_v4@flat+joint+paired+block=4"
timeout $(( 580 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --head-dims --variant full \
    --head-dim-list 24,40,56,88,104,120,136,152,184,216,232 --ropes "$M" --no-compiled --no-liger --out $OUT/r/r4 > $OUT/r/r4.log 2>&1
show $OUT/r/r4.log full; echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
