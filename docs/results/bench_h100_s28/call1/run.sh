#!/usr/bin/env bash
# Session 28, call 1: host time of one call with the GPU idle and with it busy (a ~10 ms sleep queued before the
# call), for the module call and its parts, at 32M elements (D = 54, 128) and 0.5M (D = 128); cProfile of 5 calls.
export PYTHONPATH=$PWD; mkdir -p $OUT/r; nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
python .devrun/s28/host_busy.py > $OUT/r/host_busy.txt 2>&1; cat $OUT/r/host_busy.txt | grep -v Warn
