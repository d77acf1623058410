#!/usr/bin/env bash
# Session 15, call 8: the code as shipped (joint programs by default at odd halves from D = 54): GPU tests of the
# new default path, then every odd half from 54 to 254 at 32M beside Liger, then at 256M while time lasts.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
SEL=$(python -c "print(' or '.join(f'full-{d}]' for d in range(54, 257, 8)))")
CUDA_LAUNCH_BLOCKING=1 timeout 150 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py \
  -k "kept_plan or replaced_kernel or gpt_compiles or ($SEL)" > $OUT/r/gpu.log 2>&1
tail -n 2 $OUT/r/gpu.log; grep -m 3 "^FAILED\|^ERROR" $OUT/r/gpu.log
echo "at $(( $(date +%s) - T0 )) s"
ODD=$(python -c "print(','.join(str(d) for d in range(54, 257, 4)))")
timeout 290 python -m scripts.bench_rope --budget-s 280 --variant full --head-dims --head-dim-list $ODD \
  --ropes triton_v4 --no-compiled --out $OUT/r/odd32 > $OUT/r/odd32.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd32.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/o32 /'
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full --head-dims \
  --head-dim-list 70,102,154,186,218,250,66,110,162,226 --elements 256M --ropes triton_v4 --no-compiled --out $OUT/r/odd256 > $OUT/r/odd256.log 2>&1
grep -E "D=.*fwd" $OUT/r/odd256.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/o256 /'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
