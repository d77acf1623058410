"""The names of a run dir's files: what the trainer writes and the report, generation and evaluation read.

Why a module of its own: the report reads run dirs without importing the training code (and torch), so the
names both sides use live here, in a leaf that imports nothing.
"""

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
SAMPLES_FILE = "samples.jsonl"
#: The last eval's loss per val window, written by the trainer (``llm.training.outputs``).
EVAL_WINDOWS_FILE = "eval_windows.json"
CHECKPOINT_DIR = "checkpoints"
