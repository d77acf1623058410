#!/usr/bin/env bash
# Session 36, call 7 (one H200): the GPU conformance tests at the head dims whose launch the H200 rules change.
set -u
[ -d /tmp/site/hydra ] || bash .whl/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/call7; mkdir -p $R
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $R/gpu.txt
git rev-parse HEAD > $R/commit.txt; git status --short > $R/status.txt
python -c "import rope.triton_rope as t, torch; print('profile', t.device_profile(0))" | tee $R/profile.txt
timeout 200 python -m pytest -q -p no:cacheprovider -n 8 tests/rope/test_triton_gpu.py \
  -k "test_every_head_dim[full-18] or test_every_head_dim[full-22] or test_every_head_dim[full-26] or test_every_head_dim[full-30] or test_every_head_dim[full-34] or test_every_head_dim[full-38] or test_every_head_dim[full-42] or test_every_head_dim[full-46] or test_every_head_dim[full-50] or test_every_head_dim[full-80] or test_every_head_dim[full-144] or test_every_head_dim[full-160] or test_every_head_dim[full-176] or test_every_head_dim[partial-80] or test_every_head_dim[partial-144] or test_every_head_dim[partial-160] or test_every_head_dim[partial-176] or test_gqa_at_the_joint_geometries" > $R/tests.log 2>&1
echo "tests exit $?"; tail -n 8 $R/tests.log
