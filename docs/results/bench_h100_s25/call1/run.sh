#!/usr/bin/env bash
# Session 25, call 1: the compiled seed004 step by phase (host and GPU time of the forward and of the backward +
# optimizer, and the real step), none / torch / triton_v4, shuffled rounds; Inductor's code in the log.
set -u
cd "$(dirname "$0")/.."
[ -d /tmp/site/hydra ] || bash .whl_slim/install.sh > /tmp/inst.log 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
T0=$(date +%s)
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv,noheader | tee $OUT/r/gpu.txt; cp .devrun/commit.txt $OUT/r/; cat .devrun/commit.txt
TORCH_LOGS=output_code timeout 540 python .devrun/s25/phases.py --rounds 160 > $OUT/r/phases.txt 2> $OUT/r/phases.log
tail -n 5 $OUT/r/phases.txt
# (a grep of the log into launch_counts.txt was dropped from the archive: it kept the log prefixes, unreadable)
echo "at $(( $(date +%s) - T0 )) s"
gzip $OUT/r/phases.log
cd $OUT && tar czf res.tgz r && rm -rf r
