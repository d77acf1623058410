#!/usr/bin/env bash
# Session 15, call 5: the compiled-GPT test that hit an illegal address in call 4, alone, at this code and at the
# session-14 code (git stash); the rest of the GPU suite in fresh processes; then q's flat programs taking k's
# blocks (LaunchConfig.joint) against programs apart, side by side, at 32M.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
git log --oneline -1; git status --short | head -5
for t in "triton_v2-False" "triton_v4-False" "triton_v2-True" "triton_v4-True"; do
  CUDA_LAUNCH_BLOCKING=1 timeout 60 python -m pytest -q -p no:cacheprovider "tests/rope/test_triton_gpu.py::test_gpt_compiles_fullgraph[$t]" > $OUT/r/gpt_$t.log 2>&1
  echo "now $t: $(tail -n 1 $OUT/r/gpt_$t.log)"
done
git stash -q && echo "stashed: $(git diff HEAD --stat | tail -n 1)"
CUDA_LAUNCH_BLOCKING=1 timeout 60 python -m pytest -q -p no:cacheprovider "tests/rope/test_triton_gpu.py::test_gpt_compiles_fullgraph[triton_v2-False]" > $OUT/r/gpt_s14.log 2>&1
echo "s14 triton_v2-False: $(tail -n 1 $OUT/r/gpt_s14.log)"
git stash pop -q && echo "restored: $(git diff HEAD --stat | tail -n 1)"
echo "at $(( $(date +%s) - T0 )) s"
timeout 150 python -m pytest -q -p no:cacheprovider tests/rope/test_triton_gpu.py -k "not gpt_compiles" > $OUT/r/gpu1.log 2>&1
tail -n 2 $OUT/r/gpu1.log
timeout 120 python -m pytest -q -p no:cacheprovider tests/rope/test_triton.py > $OUT/r/gpu2.log 2>&1
tail -n 2 $OUT/r/gpu2.log
echo "at $(( $(date +%s) - T0 )) s"
R="triton_v4@apart,triton_v4@joint"
timeout $(( 585 - $(date +%s) + T0 )) python -m scripts.bench_rope --budget-s $(( 570 - $(date +%s) + T0 )) --variant full --head-dims \
  --head-dim-list 34,254,130,210,18,66,162 --ropes $R --no-compiled --out $OUT/r/full > $OUT/r/full.log 2>&1
grep -E "D=.*fwd" $OUT/r/full.log | sed 's/.*D=/D=/' | sed 's/(build+compile [0-9.]* s)//; s/fwd\/bwd % copy  //' | sed 's/^/full /'
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
