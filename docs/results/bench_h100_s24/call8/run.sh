#!/usr/bin/env bash
# Session 24, call 8: test_triton.py's compile, op and traced-plan tests on the GPU at the final code (the fused
# forward op under dynamic shapes: the triton op falls back to the custom op with T as a symbol).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 400 python -m pytest -q -p no:cacheprovider -rf tests/rope/test_triton.py \
  -k "compile or opcheck or traced or constexpr or in_buffer or qkv" > $OUT/r/tests.log 2>&1
tail -n 3 $OUT/r/tests.log; grep -E "^FAILED" $OUT/r/tests.log | head -20
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
