set -x
export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid,clocks.sm,clocks.max.sm,clocks.mem --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
python .devrun/s27/decompose.py 18 > $OUT/r/smoke.txt 2>&1 || { tail -30 $OUT/r/smoke.txt; exit 1; }
cat $OUT/r/smoke.txt
python .devrun/s27/decompose.py 38,48,54,56,64,114,128,206,208 > $OUT/r/decompose.txt 2>&1
cat $OUT/r/decompose.txt
nvidia-smi --query-gpu=name,uuid,clocks.sm,clocks.max.sm,clocks.mem --format=csv >> $OUT/r/gpu.txt
