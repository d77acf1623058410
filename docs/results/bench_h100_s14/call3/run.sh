#!/usr/bin/env bash
# Session 14, call 3: the final code (words + paired at R2 mod 8 = 1, 7 for D <= 50 and >= 174): GPU tests at the
# odd halves it changes and the words tests; variant=full at all 60 odd halves at 32M beside Liger.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
K="full-18 or full-30 or full-34 or full-46 or full-50 or full-174 or full-178 or full-190 or full-194 or full-206 or full-210 or full-222 or full-226 or full-238 or full-242 or full-254 or full-22 or full-186"
timeout 120 python -m pytest -q tests/rope/test_triton_gpu.py -k "every_head_dim and ($K)" 2>&1 | tail -2 | tee $OUT/r/gpu_tests.txt
timeout 60 python -m pytest -q tests/rope/test_triton.py -k "words" 2>&1 | tail -2 | tee -a $OUT/r/gpu_tests.txt
echo "tests at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 545 - $(date +%s) + T0 )) --head-dims --variant full --head-dim-list 18,22,26,30,34,38,42,46,50,54,58,62,66,70,74,78,82,86,90,94,98,102,106,110,114,118,122,126,130,134,138,142,146,150,154,158,162,166,170,174,178,182,186,190,194,198,202,206,210,214,218,222,226,230,234,238,242,246,250,254 \
  --ropes triton_v4 --no-compiled --out $OUT/r/odd32 > $OUT/r/odd32.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
