#!/usr/bin/env bash
# Session 15, call 6: the GPU suite of test_triton_gpu.py (but every_head_dim) with CUDA_LAUNCH_BLOCKING=1, to find
# the launch behind call 4's illegal address; then joint programs at the large odd halves and the partial
# R2 = 2 mod 8 family, beside apart and Liger, 32M.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
CUDA_LAUNCH_BLOCKING=1 timeout 220 python -m pytest -q -p no:cacheprovider -x tests/rope/test_triton_gpu.py -k "not every_head_dim" \
  > $OUT/r/gpu_blocking.log 2>&1
tail -n 3 $OUT/r/gpu_blocking.log; grep -m 3 -n "^FAILED\|^ERROR\|illegal" $OUT/r/gpu_blocking.log
echo "at $(( $(date +%s) - T0 )) s"
R="triton_v4@apart,triton_v4@joint,triton_v4@joint+words+paired"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full --head-dims \
  --head-dim-list 174,178,182,186,190,194,198,202,206,214,218,222,226,230,234,238,242,246,250,130,98 --ropes $R --no-compiled \
  --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/full /'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
