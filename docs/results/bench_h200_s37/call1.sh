#!/usr/bin/env bash
# Session 37, call 1 (one H200): the Triton GPU test file whole under the H200 launch rules (session 36's call 7
# never ran), then variant full at D = 156-256 at 32M beside Liger and compiled torch (session 36 stopped at 154).
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call1; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
python -c "import rope.triton_rope as t; print('profile', t.device_profile(0))" | tee $R/profile.txt
timeout 230 python -m pytest -q -p no:cacheprovider -n 8 tests/rope/test_triton_gpu.py > $R/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; tail -n 4 $R/tests.log | cut -c1-300
left=$(( 570 - $(date +%s) + T0 ))
timeout $left python -m scripts.bench_rope --budget-s $(( left - 15 )) --head-dims --variant full --ropes triton_v4 \
  --head-dim-list 156,158,160,162,164,166,168,170,172,174,176,178,180,182,184,186,188,190,192,194,196,198,200,202,204,206,208,210,212,214,216,218,220,222,224,226,228,230,232,234,236,238,240,242,244,246,248,250,252,254,256 --out $R/full > $R/full.log 2>&1
echo "full exit $? at $(( $(date +%s) - T0 )) s"; tail -n 4 $R/full.log | cut -c1-300
cd $R && tar czf ../call1.tgz . && cd .. && rm -rf call1
