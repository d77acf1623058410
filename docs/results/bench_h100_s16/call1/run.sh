#!/usr/bin/env bash
# Session 16, call 1: the illegal address in test_triton_gpu.py run whole. Five processes side by side.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
F=tests/rope/test_triton_gpu.py
P="python -m pytest -q -p no:cacheprovider -x"
(CUDA_LAUNCH_BLOCKING=1 timeout 540 $P --tb=long $F > $OUT/r/p1_blocking.log 2>&1; echo "p1 done $(( $(date +%s) - T0 ))") &
(PYTHONPATH=$PYTHONPATH:$PWD/.devrun/s16 timeout 540 $P -p nostatic $F > $OUT/r/p2_nostatic.log 2>&1; echo "p2 done $(( $(date +%s) - T0 ))") &
(mkdir -p /tmp/old && git archive c086002 | tar -x -C /tmp/old && cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 540 $P $F > $OUT/r/p3_c086002.log 2>&1; echo "p3 done $(( $(date +%s) - T0 ))") &
(timeout 540 $P -k "large_tensor or torch_compile_fullgraph or gpt_compiles" $F > $OUT/r/p4_large.log 2>&1; echo "p4 done $(( $(date +%s) - T0 ))") &
(timeout 540 $P -k "every_head_dim or gpt_compiles" $F > $OUT/r/p5_everyhd.log 2>&1; echo "p5 done $(( $(date +%s) - T0 ))") &
wait
for f in $OUT/r/*.log; do echo "== $f"; tail -n 2 $f; grep -m 4 "^FAILED\|^ERROR\|illegal" $f; done
grep -n "illegal" -B 40 $OUT/r/p1_blocking.log | grep -v "^\s*$" | head -120
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
