#!/usr/bin/env bash
# Session 13, call 3: split against paired cos/sin tables at every odd half (variant=full, D = 2 mod 4), one run,
# the two side by side per D; the tiling-identity test (both table formats) on the GPU.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
timeout 150 python -m pytest -q -x tests/rope/test_triton.py -k "identical_results and triton_v4" 2>&1 | tail -1 | tee $OUT/gpu_tests.txt
echo "tests at $(( $(date +%s) - T0 )) s"
timeout 330 python -m scripts.bench_rope --variant full --head-dims --head-dim-list 18,22,26,30,34,38,42,46,50,54,58,62,66,70,74,78,82,86,90,94,98,102,106,110,114,118,122,126,130,134,138,142,146,150,154,158,162,166,170,174,178,182,186,190,194,198,202,206,210,214,218,222,226,230,234,238,242,246,250,254 --ropes triton_v4@split,triton_v4@paired --no-liger --no-compiled --out $OUT/ab > $OUT/ab.log 2>&1
grep -E "D=.*fwd" $OUT/ab.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//' | sed 's/fwd\/bwd % copy  //; s/triton_v4@//g'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz ab && rm -rf ab
