export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
python .devrun/s27/sn_probe.py 54,114,128,206,38 > $OUT/r/sn_probe.txt 2>&1
grep -v Warn $OUT/r/sn_probe.txt | grep -v _warn_once
