"""Tokenizers the engine speaks to: a byte-level one for the presets, an adapter for Hugging Face ones."""

from __future__ import annotations

from typing import Protocol

BYTE_VOCAB = 256


class Tokenizer(Protocol):
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes are token ids 0..255; the rest of a preset's vocabulary prints as "<id>".

    The presets have random weights, so no learned vocabulary is worth downloading; bytes make every
    prompt encodable and every generated id printable.
    """

    eos_token_id: int | None = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        out: list[str] = []
        pending = bytearray()
        for i in ids:
            if 0 <= i < BYTE_VOCAB:
                pending.append(i)
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            out.append(f"<{i}>")
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)


class HFTokenizer:
    """A Hugging Face tokenizer behind the same two calls."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)


class IncrementalText:
    """Turns a growing token list into text deltas, holding back a trailing half-decoded character."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.emitted = ""

    def push(self, ids: list[int]) -> str:
        self.ids += ids
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # a multi-byte character still arriving
            return ""
        return self._delta(text)

    def flush(self) -> str:
        return self._delta(self.tokenizer.decode(self.ids))

    def _delta(self, text: str) -> str:
        if not text.startswith(self.emitted):  # a tokenizer that re-spells earlier text: resend nothing twice
            self.emitted = text
            return ""
        delta, self.emitted = text[len(self.emitted) :], text
        return delta
