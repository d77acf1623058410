"""Text in and out of the tokenizer, as generation needs it.

A prompt starts with the end-of-text token: training documents are stored as ``doc, eot, doc, eot``,
so text after an end-of-text token is what the model knows as the start of a document (and an empty
prompt is still one token to start from). Output arrives one token at a time, and a token may end in
the middle of a UTF-8 character; :class:`TextStream` holds such bytes back until the character is
whole, so streamed text never shows replacement characters that the full decode would not.
The head has a row for every id below ``n_vocab``, but not every such id is a token the model could have
learned to write (:func:`never_written`): decoding masks them.
"""

from __future__ import annotations

import codecs

import tiktoken


def encode_prompt(enc: tiktoken.Encoding, text: str) -> list[int]:
    """The token ids of ``text`` as a document start: end-of-text, then the text (special-token
    spellings such as ``<|endoftext|>`` in the text are plain text, as in training)."""
    return [enc.eot_token, *enc.encode_ordinary(text)]


def never_written(enc: tiktoken.Encoding) -> list[int]:
    """The ids below ``enc.n_vocab`` that no training document holds: the gaps of the vocabulary (cl100k_base has
    ids that are no token, which tiktoken cannot decode) and the special tokens but end-of-text (training encodes
    text with ``encode_ordinary``). Decoding never draws them: a gap would end the command with tiktoken's
    KeyError, and a special token would print a spelling the model never read."""
    never = []
    for token in range(enc.n_vocab):
        try:
            enc.decode_single_token_bytes(token)
        except KeyError:
            never.append(token)
    never += [enc.encode_single_token(s) for s in enc.special_tokens_set]
    return sorted(t for t in set(never) if t != enc.eot_token and t < enc.n_vocab)


def cut_at(tokens: list[int], stop_token: int) -> tuple[list[int], bool]:
    """``tokens`` up to (without) the first ``stop_token``, and whether there was one."""
    if stop_token in tokens:
        return tokens[:tokens.index(stop_token)], True
    return tokens, False


class TextStream:
    """Decode tokens one at a time into the text they add (UTF-8 characters completed across tokens)."""

    def __init__(self, enc: tiktoken.Encoding) -> None:
        self.enc = enc
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._utf8.decode(self.enc.decode_single_token_bytes(token))

    def flush(self) -> str:
        """What is left at the end (an incomplete character becomes a replacement character)."""
        return self._utf8.decode(b"", final=True)
