#!/usr/bin/env bash
# Session 17, call 3: the compile workers' static launch fix (GPU test counting Python launches; the seed004 step
# compiled and eager) and words + paired tables by default at D = 20, 36, 52.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
F=tests/rope/test_triton_gpu.py
timeout 240 python -m pytest -q -p no:cacheprovider $F -k "compiled_gpt_launches or gpt_compiles or (every_head_dim and (20 or 36 or 52))" \
  > $OUT/r/gpu_tests.log 2>&1; tail -n 3 $OUT/r/gpu_tests.log; grep -m 5 "^FAILED\|^E " $OUT/r/gpu_tests.log
echo "at $(( $(date +%s) - T0 )) s"
for V in partial full; do
  timeout 100 python -m scripts.bench_rope --budget-s 90 --variant $V --head-dims --head-dim-list 20,36,52,68 \
    --ropes "triton_v4,triton_v4@elements+split" --no-compiled --no-liger --out $OUT/r/fam_$V > $OUT/r/fam_$V.log 2>&1
  grep -E "D=.*fwd" $OUT/r/fam_$V.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed "s/^/$V /"
done
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --iters 600 --rounds 10 --out $OUT/r/step > $OUT/r/step.log 2>&1
tail -n 12 $OUT/r/step.log
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
