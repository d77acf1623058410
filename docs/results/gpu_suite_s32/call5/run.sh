# Session 32, call 5 (one GPU): the README's test command, `python -m pytest -q -n auto`, over the whole suite at the
# session's final code, in two halves (each call has 10 minutes): $1 = rope | rest.
bash .whl/install.sh >/dev/null 2>&1 || echo "wheel install failed"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 WANDB_MODE=offline
R=$OUT/r; mkdir -p $R; nvidia-smi -L | tee $R/gpu.txt
if [ "$1" = rope ]; then set -- tests/rope; else set -- tests/llm tests/report tests/experiments tests/scripts; fi
timeout 540 python -m pytest -q -n auto -p no:cacheprovider --timeout 400 -rfE "$@" > $R/tests_$(basename $1).log 2>&1
echo "pytest exit $?" >> $R/tests_$(basename $1).log; grep -E "^(FAILED|ERROR)" $R/*.log | head -20; tail -2 $R/*.log
