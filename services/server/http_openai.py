"""The OpenAI request bodies the HTTP API takes and the answers it shapes (the routes are http_api.py's).

Bodies are pydantic models with strict types (a max_tokens of "16" or 16.5 is refused, not coerced); fields this
server does not know are ignored, as OpenAI clients send many. Fields it knows but cannot honour (n > 1, logprobs,
penalties, tools, ...) are refused naming the field, rather than ignored into a different answer than was asked.
`ignore_eos` is vLLM's extension, which benchmark tools send to fix the output length.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.server.http_wire import HttpError
from services.server.requests import BadArgument

COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; a chat's default is as many as fit
DEFAULT_TEMPERATURE = 1.0  # OpenAI's default: a request without one is sampled (gRPC's default is greedy)
FINISH = {"length": "length", "eos": "stop", "stop": "stop"}  # the engine's reasons in OpenAI's words
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


Body = TypeVar("Body", bound=_Body)


class StreamOptions(_Body):
    include_usage: bool | None = False


class _Generation(_Body):
    model: str | None = None  # None or empty: the served model
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)  # what torch.Generator.manual_seed takes
    ignore_eos: bool | None = False
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def unsupported(self) -> list[tuple[str, bool]]:
        """(field, whether it asks for something this server cannot do)."""
        return [
            ("n", self.n not in (None, 1)),
            ("presence_penalty", self.presence_penalty not in (None, 0)),
            ("frequency_penalty", self.frequency_penalty not in (None, 0)),
            ("logit_bias", bool(self.logit_bias)),
        ]

    def check_supported(self) -> None:
        for name, asked in self.unsupported():
            if asked:
                raise BadArgument(
                    f"{name}={getattr(self, name)!r} is not supported: this server generates one plain-text choice "
                    f"per request, without {name}",
                    name,
                )


class CompletionRequest(_Generation):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = None
    echo: bool | None = False
    best_of: int | None = None
    logprobs: int | None = None
    suffix: str | None = None

    def unsupported(self) -> list[tuple[str, bool]]:
        return [
            *super().unsupported(),
            ("echo", bool(self.echo)),
            ("best_of", self.best_of not in (None, 1)),
            ("logprobs", self.logprobs is not None),
            ("suffix", bool(self.suffix)),
        ]

    def prompt_input(self) -> tuple[str, list[int]]:
        """(text, token ids): one of them, the other empty."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                raise BadArgument(f"one prompt per request, got {len(prompt)}", "prompt")
            prompt = prompt[0]
        return (prompt, []) if isinstance(prompt, str) else ("", list(prompt))


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None


class ChatRequest(_Generation):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list | None = None
    response_format: dict | None = None

    def unsupported(self) -> list[tuple[str, bool]]:
        text = self.response_format is None or self.response_format.get("type") in (None, "text")
        return [
            *super().unsupported(),
            ("logprobs", bool(self.logprobs)),
            ("top_logprobs", bool(self.top_logprobs)),
            ("tools", bool(self.tools)),
            ("response_format", not text),
        ]

    def turns(self) -> list[dict[str, str]]:
        """The messages as {"role", "content"} with their text parts joined; a part that is not text is refused."""
        out = []
        for i, message in enumerate(self.messages):
            content = message.content
            if isinstance(content, list):
                for part in content:
                    if part.type != "text" or part.text is None:
                        raise BadArgument(
                            f"message {i} has a content part of type {part.type!r}: this server takes text only",
                            f"messages.{i}.content",
                        )
                content = "".join(part.text or "" for part in content)
            out.append({"role": message.role, "content": content or ""})
        return out


def chat_prompt(tokenizer, turns: list[dict[str, str]]) -> tuple[str, Callable[[str], list[int]] | None]:
    """A chat's prompt text, and how to encode it (None: the engine's own encoding).

    With a Hugging Face tokenizer that has a chat template, the template renders the messages and the generation
    prompt, and the text is encoded without adding special tokens again (the template wrote them). Otherwise (the
    byte-level presets, a checkpoint without a template) each message is a "role: content" line and the prompt ends
    with "assistant:".
    """
    hf = getattr(tokenizer, "tok", None)
    if hf is not None and getattr(hf, "chat_template", None):
        try:
            text = hf.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # jinja's TemplateError, or the template's own raise_exception
            raise BadArgument(f"the model's chat template refused these messages: {exc}", "messages") from None
        return text, lambda s: list(hf.encode(s, add_special_tokens=False))
    return "".join(f"{t['role']}: {t['content']}\n" for t in turns) + "assistant:", None


def parse_body(body_type: type[Body], raw: bytes) -> Body:
    """The request body as `body_type`; a 400 naming the field (or the JSON's fault) when it is not one."""
    if not raw.strip():
        raise HttpError(400, "the body is empty: send a JSON object", code="invalid_json")
    try:
        data = pydantic_core.from_json(raw)
    except ValueError as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise HttpError(400, f"the body must be a JSON object, got {type(data).__name__}", code="invalid_json")
    try:
        return body_type.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"] if isinstance(p, int) or _is_field(p)) or None
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise HttpError(400, f"{param}: {first['msg']}{more}" if param else first["msg"], param=param) from None


def _is_field(part: str) -> bool:
    # pydantic's location of a union's branch is a type tag (str, list[int], ChatMessage): not a field
    return part.isidentifier() and part.islower() and part not in _TYPE_TAGS


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(frozen=True)
class Reply:
    """The shapes of one answer: whole, or streamed in chunks, for a completion or a chat."""

    chat: bool
    id: str
    created: int
    model: str

    def _frame(self, object_: str, choices: list, **more: Any) -> dict:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model, "choices": choices,
                **more}  # fmt: skip

    def whole(self, text: str, finish: str, used: dict[str, int]) -> dict:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": FINISH[finish]}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            return self._frame("chat.completion", [choice], usage=used)
        return self._frame("text_completion", [{**choice, "text": text}], usage=used)

    def chunk(self, text: str, finish: str | None = None, *, role: bool = False) -> str:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": FINISH[finish] if finish else None}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": ""} if role else {"content": text} if text else {}
            return json.dumps(self._frame("chat.completion.chunk", [choice]))
        return json.dumps(self._frame("text_completion", [{**choice, "text": text}]))

    def usage_chunk(self, used: dict[str, int]) -> str:
        return json.dumps(self._frame("chat.completion.chunk" if self.chat else "text_completion", [], usage=used))
