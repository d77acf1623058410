#!/usr/bin/env bash
# Session 38, call 1 (one H200): the Triton GPU test file whole under the H200 rules with session 37's register cap
# (its call 1 ran before the cap), then report13's parts a and b in smoke mode (REPORT13_SMOKE=1: run.sh had never
# run), so the H100 report's script and collector are checked end to end.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call1; mkdir -p $R; T0=$(date +%s)
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
python -c "import rope.triton_rope as t; print('profile', t.device_profile(0), 'rows registers', t.ROWS_REGISTERS)" | tee $R/profile.txt
timeout 230 python -m pytest -q -p no:cacheprovider -n 8 tests/rope/test_triton_gpu.py > $R/tests.log 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; tail -n 4 $R/tests.log | cut -c1-300
cd $R && tar czf ../call1.tgz . && cd - > /dev/null && rm -rf $R
for p in a b; do REPORT13_SMOKE=1 bash docs/results/report13/run.sh $p; echo "part $p at $(( $(date +%s) - T0 )) s"; done
