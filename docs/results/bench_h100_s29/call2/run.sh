export PYTHONPATH=$PWD
for cfg in "8 54 64 16" "8 54 128 8" "27 54 64 16" "27 54 128 8" "0 54 64 16" "2 54 64 16" "4 54 64 16"; do
  set -- $cfg
  SHIFT=$1 timeout 60 python .devrun/tma_probe.py crash $2 $3 $4 2>&1 | grep -E "crash_test|Error" | head -3
  echo "--- shift=$1 D=$2 CW=$3 BR=$4 rc=$?"
done
