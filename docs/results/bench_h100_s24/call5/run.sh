#!/usr/bin/env bash
# Session 24, call 5 (a second machine): the compiled seed004 step finely interleaved again, the launch chain, and the
# rest of the Triton GPU suite (all but the compile tests of call 4 and the head-dim sweep).
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/r/smi_fine.csv 2>&1 &
SMI=$!
timeout 320 python -m scripts.bench_step --model seed004 --ropes none,torch,triton_v4 --no-liger \
  --modes compile --iters 2000 --rounds 1000 --out $OUT/r/step_fine > $OUT/r/step_fine.log 2>&1
kill $SMI
tail -n 7 $OUT/r/step_fine.log
echo "at $(( $(date +%s) - T0 )) s"
rm -rf /tmp/torchinductor_root
timeout 100 python .devrun/s24/launch_chain_sdpa.py > $OUT/r/launch_chain_sdpa.txt 2> $OUT/r/launch_chain_sdpa.log
head -n 5 $OUT/r/launch_chain_sdpa.txt
echo "at $(( $(date +%s) - T0 )) s"
timeout $(( 585 - $(date +%s) + T0 )) python -m pytest -q -p no:cacheprovider -rf tests/rope/test_triton_gpu.py \
  -k "not compile and not tiling and not eagerly and not launches and not every_head_dim" > $OUT/r/tests.log 2>&1
tail -n 3 $OUT/r/tests.log; grep -E "^FAILED" $OUT/r/tests.log | head -20
echo "at $(( $(date +%s) - T0 )) s"
cd $OUT && tar czf res.tgz r && rm -rf r
