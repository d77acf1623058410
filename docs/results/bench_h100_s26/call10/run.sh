#!/usr/bin/env bash
# Session 26, call 10: bench_rope --flush steady at the final code runs on the H100 (its L2 read for the threshold).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/
python -c "import torch; print('L2_cache_size', torch.cuda.get_device_properties(0).L2_cache_size)" | tee $OUT/r/l2.txt
timeout 200 python -m scripts.bench_rope --head-dims --variant full --flush steady --head-dim-list 54,64 --ropes triton_v4 \
  --no-compiled --out $OUT/r/hd > $OUT/r/hd.log 2>&1; echo "rc $?" >> $OUT/r/hd.log; tail -n 4 $OUT/r/hd.log | cut -c1-250
grep -h "flush" $OUT/r/hd/headdim_32M.md | cut -c1-400
cd $OUT && tar czf res.tgz r && rm -rf r
