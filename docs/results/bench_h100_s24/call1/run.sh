#!/usr/bin/env bash
# Session 24, call 1: the traced fused-qkv forward (qkv handed over whole, None for unread slots) on the GPU: the
# compile tests, then the like-for-like launch chain (host time a rotation launch, triton_v4 vs compiled torch).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
timeout 260 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py tests/rope/test_triton.py \
  -k "compile or tiling or eagerly or launches or traced or in_buffer or qkv" > $OUT/r/tests.log 2>&1
tail -n 15 $OUT/r/tests.log
echo "at $(( $(date +%s) - T0 )) s"
rm -rf /tmp/torchinductor_root
TORCH_LOGS=output_code timeout $(( 570 - $(date +%s) + T0 )) python .devrun/s24/launch_chain_sdpa.py \
  > $OUT/r/launch_chain_sdpa.txt 2> $OUT/r/launch_chain_sdpa.log
head -n 5 $OUT/r/launch_chain_sdpa.txt
grep -E "rope_kernel_static_0.run\(|triton_poi_fused.*cos.*sin.*run\(" $OUT/r/launch_chain_sdpa.log | sort | uniq -c | head -6
grep -A12 "cProfile, " $OUT/r/launch_chain_sdpa.txt | grep -E "====|reinterpret|function calls"
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
