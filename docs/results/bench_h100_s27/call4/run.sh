export PYTHONPATH=$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,uuid --format=csv > $OUT/r/gpu.txt
cat .devrun/commit.txt > $OUT/r/commit.txt
python .devrun/s27/tables_probe.py > $OUT/r/tables_probe.txt 2>&1
grep -v Warn $OUT/r/tables_probe.txt | grep -v _warn_once
