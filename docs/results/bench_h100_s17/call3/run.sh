#!/usr/bin/env bash
# Session 16, call 2: (a) compute-sanitizer on the compiled GPT test, caching allocator off, at add1d7a with
# SHARED_OUT_UNDER_COMPILE off (expected: Inductor's out-of-bounds clone read) and at the fix; (b) the whole GPU
# file in one process at the fix; then (c) the seed004 step, compiled and eager, paired rounds.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: $CS"
F=tests/rope/test_triton_gpu.py
mkdir -p /tmp/old && git archive add1d7a | tar -x -C /tmp/old
(cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 $CS --tool memcheck \
  --print-limit 20 python -m pytest -q -p no:cacheprovider $F -k "gpt_compiles_fullgraph and triton_v4-False" \
  > $OUT/r/san_old_off.log 2>&1; echo "old off done $(( $(date +%s) - T0 ))") &
(cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 $CS --tool memcheck \
  --print-limit 20 python -m pytest -q -p no:cacheprovider $F -k "gpt_compiles_fullgraph and triton_v4-True" \
  > $OUT/r/san_old_on.log 2>&1; echo "old on done $(( $(date +%s) - T0 ))") &
(PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 240 $CS --tool memcheck --print-limit 20 python -m pytest -q \
  -p no:cacheprovider $F -k "gpt_compiles_fullgraph or layout_positions" > $OUT/r/san_new.log 2>&1; \
  echo "new done $(( $(date +%s) - T0 ))") &
(timeout 330 python -m pytest -q -p no:cacheprovider $F > $OUT/r/gpu_whole.log 2>&1; echo "whole done $(( $(date +%s) - T0 ))") &
wait
for f in $OUT/r/*.log; do echo "== $f"; grep -E "ERROR SUMMARY|passed|failed" $f | tail -n 3; \
  grep -m 6 -E "Invalid|Address 0x|at .*triton_poi|^=========     at" $f; done
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step > $OUT/r/step.log 2>&1
tail -n 25 $OUT/r/step.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
