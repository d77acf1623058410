"""Data layer: text sources -> tokenized, memory-mapped train/val token streams, cached on disk.

Where things are:

* ``config``      -- the ``data.*`` keys' readers and ``DataError``.
* ``check``       -- ``check_data_config``, run before any work: the source, its keys and values, the tokenizer.
* ``sources/``    -- the sources (``pystdlib``, ``tinystories``, ``text_files``, ``code_corpus``, ``hf_dataset``) and
  their registry ``SOURCES``;
  ``sources/file_readers`` reads .txt/.jsonl/.parquet, refusing what is not text with the file and line.
* ``split``       -- the train/val split by document identity, and the cap on one document's share of val.
* ``cache``       -- the data cache: ``prepare_data`` builds (once) and verifies (every load) the token shards;
  ``data_fingerprint`` is a run's record of what it read.
* ``encode``      -- documents to token ids on a thread pool, a long one in pieces cut where its ids cannot change.
* ``cache_lock``  -- the lock that lets concurrent processes build one cache, leaving no empty dir on failure.
* ``batches``     -- ``sample_batch`` (training windows from (seed, step)), ``val_batches`` (the fixed val set, its
  windows' starts from ``val_window_starts``) and ``check_streams`` (both streams long enough for one window,
  checked before the model is built).
* ``tokenizer``   -- tiktoken with an offline default, and one-line errors when a download has no network.
"""

from llm.data.batches import check_streams, sample_batch, val_batches, val_window_starts
from llm.data.cache import TokenData, data_fingerprint, prepare_data, token_dtype
from llm.data.check import check_data_config
from llm.data.config import DataError
from llm.data.sources import SOURCES
from llm.data.tokenizer import NetworkUnavailableError, get_tokenizer

__all__ = [
    "SOURCES",
    "DataError",
    "NetworkUnavailableError",
    "TokenData",
    "check_data_config",
    "check_streams",
    "data_fingerprint",
    "get_tokenizer",
    "prepare_data",
    "sample_batch",
    "token_dtype",
    "val_batches",
    "val_window_starts",
]
