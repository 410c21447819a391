"""The LLM APIs an author may ask (adapters: the coder's only network I/O).

- `GeminiProvider`: Google's Gemini through google-genai (`generateContent`, structured output by
  `responseJsonSchema`); `base_url` points it elsewhere (a local endpoint speaking the Gemini REST shape).
- `OpenAICompatibleProvider`: `POST {base_url}/chat/completions` over plain HTTP (httpx2, which google-genai
  brings), structured output by `response_format` json_schema: OpenAI, vLLM, llama.cpp's server, ...

Both ask at temperature 0 with a fixed seed and a cap on the answer's tokens, retry a 429, a 5xx or a timeout with
backoff (bounded by the attempts they are given), and turn everything else the API or the network does into the
`AuthorObservation` they return. The API key comes from the environment (GEMINI_API_KEY or GOOGLE_API_KEY,
OPENAI_API_KEY) when a request is made; it is never logged or recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.coder import llm_answer
from services.coder.authors import GEMINI, OPENAI_COMPATIBLE, SEED, Ask
from services.core.pb import events_pb2 as pb
from services.core.settings import redact_url

log = logging.getLogger(__name__)

DEFAULT_MODELS = {GEMINI: "gemini-2.5-flash", OPENAI_COMPATIBLE: "gpt-4.1-mini"}
OPENAI_BASE_URL = "https://api.openai.com/v1"
MAX_ANSWER_CHARS = 256 * 1024  # what is recorded of an answer (far past what the answer's token cap allows)
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass
class Reply:
    """One HTTP exchange's outcome, before it is an observation."""

    status: int = 0
    text: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    answer_tokens: int = 0
    error: str = ""


def _clean(text: str, limit: int = MAX_ANSWER_CHARS) -> str:
    """Text protobuf can hold (UTF-8: a lone surrogate replaced), at most `limit` characters."""
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


class RetryingProvider:
    """Attempts, backoff and the observation: what both providers share."""

    name = ""

    def __init__(
        self,
        model: str = "",
        base_url: str = "",
        *,
        answer_tokens: int = 8192,
        timeout_s: float = 120.0,
        backoff_s: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.model = model or DEFAULT_MODELS[self.name]
        self.base_url = base_url
        self.answer_tokens, self.timeout_s, self.backoff_s, self.sleep = answer_tokens, timeout_s, backoff_s, sleep

    async def send(self, ask: Ask, sent: list[bytes]) -> Reply:
        """One request, answered or failed; the body's exact bytes appended to `sent` as it goes out."""
        raise NotImplementedError

    async def answer(self, ask: Ask, *, attempts: int) -> pb.AuthorObservation:
        started = time.monotonic()
        reply, made, sent = Reply(error="no request made: no call left in the budget"), 0, []
        for made in range(1, max(0, attempts) + 1):
            try:
                async with asyncio.timeout(self.timeout_s):
                    reply = await self.send(ask, sent)
            except TimeoutError:
                reply = Reply(error=f"timeout: no answer within {self.timeout_s:g} s")
            retry = reply.status in RETRY_STATUSES or reply.error.startswith("timeout")
            if not retry or made == attempts:
                break
            delay = self.backoff_s * 2 ** (made - 1)
            log.warning("%s: %s; retrying in %.1f s (%d of %d)", self.name, reply.error, delay, made, attempts)
            await self.sleep(delay)
        return pb.AuthorObservation(
            provider=self.name,
            model=self.model,
            request_sha256=hashlib.sha256(sent[-1]).hexdigest() if sent else "",
            answer=_clean(reply.text),
            finish_reason=_clean(reply.finish_reason, 64),
            prompt_tokens=max(0, reply.prompt_tokens),
            answer_tokens=max(0, reply.answer_tokens),
            http_status=reply.status,
            error=_clean(reply.error, 2000),
            attempts=made,
            wall_s=round(time.monotonic() - started, 3),
            endpoint=redact_url(self.base_url),
        )


def _status_error(status: int, body: str) -> str:
    return f"HTTP {status}: {body.strip()[:300]}"


class GeminiProvider(RetryingProvider):
    name = GEMINI

    async def send(self, ask: Ask, sent: list[bytes]) -> Reply:
        try:
            import httpx2
            from google import genai
            from google.genai import errors, types
        except ImportError as exc:
            return Reply(error=f"google-genai is not installed (pip install 'gpuyantra[llm]'): {exc}")
        key = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY") or ""
        if not key:
            return Reply(error="no API key: set GEMINI_API_KEY in the coder's environment")

        async def keep_body(request) -> None:  # the exact bytes sent, for the request's hash
            sent.append(request.content)

        reply = Reply()
        async with httpx2.AsyncClient(event_hooks={"request": [keep_body]}) as http:
            options = types.HttpOptions(
                base_url=self.base_url or None,
                api_version="v1beta",
                retry_options=types.HttpRetryOptions(attempts=1),  # retries are ours: bounded, on 429/5xx/timeouts
                httpx_async_client=http,
            )
            client = genai.Client(api_key=key, http_options=options)
            config = types.GenerateContentConfig(
                system_instruction=ask.system,
                temperature=0.0,
                seed=SEED,
                max_output_tokens=self.answer_tokens,
                response_mime_type="application/json",
                response_json_schema=llm_answer.response_schema(),
            )
            try:
                response = await client.aio.models.generate_content(
                    model=self.model, contents=ask.prompt, config=config
                )
            except errors.APIError as exc:
                reply = Reply(status=int(exc.code or 0), error=_scrub(_status_error(int(exc.code or 0), str(exc)), key))
            except (httpx2.TransportError, OSError) as exc:
                reply = Reply(error=_scrub(f"connection: {type(exc).__name__}: {exc}", key)[:300])
            else:
                reply = _gemini_reply(response)
        return reply


def _gemini_reply(response) -> Reply:
    usage = response.usage_metadata
    reply = Reply(
        status=200,
        prompt_tokens=(usage.prompt_token_count or 0) if usage else 0,
        # thinking is billed and counts against the answer's cap: it is the answer's cost too
        answer_tokens=((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)) if usage else 0,
    )
    if not response.candidates:  # the prompt itself was blocked
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback is not None else None
        reply.finish_reason = f"BLOCKED_{getattr(reason, 'name', reason) or 'NO_CANDIDATE'}"
        return reply
    first = response.candidates[0]
    reason = first.finish_reason
    reply.finish_reason = getattr(reason, "name", None) or (str(reason) if reason else "")
    parts = first.content.parts if first.content is not None and first.content.parts else []
    reply.text = "".join(p.text for p in parts if p.text and not p.thought)
    return reply


class OpenAICompatibleProvider(RetryingProvider):
    name = OPENAI_COMPATIBLE

    def request_body(self, ask: Ask) -> bytes:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": ask.system}, {"role": "user", "content": ask.prompt}],
            "temperature": 0,
            "seed": SEED,
            "max_tokens": self.answer_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "candidate", "strict": True, "schema": llm_answer.response_schema()},
            },
        }
        return json.dumps(body, sort_keys=True).encode()

    async def send(self, ask: Ask, sent: list[bytes]) -> Reply:
        try:
            import httpx2
        except ImportError as exc:
            return Reply(error=f"httpx2 is not installed (pip install 'gpuyantra[llm]'): {exc}")
        key = os.environ.get("OPENAI_API_KEY", "")
        body = self.request_body(ask)
        reply = Reply()
        sent.append(body)
        headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {key}"} if key else {})
        url = (self.base_url or OPENAI_BASE_URL).rstrip("/") + "/chat/completions"
        try:
            async with httpx2.AsyncClient(timeout=self.timeout_s) as http:
                response = await http.post(url, content=body, headers=headers)
        except httpx2.TimeoutException:
            reply.error = f"timeout: no answer within {self.timeout_s:g} s"
            return reply
        except (httpx2.TransportError, OSError) as exc:
            reply.error = _scrub(f"connection: {type(exc).__name__}: {exc}", key)[:300]
            return reply
        reply.status = response.status_code
        if response.status_code != 200:
            reply.error = _scrub(_status_error(response.status_code, response.text), key)
            return reply
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
            usage = data.get("usage") or {}
            reply.finish_reason = str(choice.get("finish_reason") or "")
            reply.text = str(message.get("content") or "")
            if message.get("refusal"):
                reply.finish_reason, reply.text = "refusal", str(message["refusal"])
            reply.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            reply.answer_tokens = int(usage.get("completion_tokens") or 0)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            reply.error = f"the endpoint's answer is not a chat completion ({type(exc).__name__}: {exc})"[:300]
        return reply


PROVIDERS = {GEMINI: GeminiProvider, OPENAI_COMPATIBLE: OpenAICompatibleProvider}


def providers_from(settings) -> dict:
    """The providers a coder asks, configured from its settings (services.core.settings: YANTRA_LLM_*)."""
    return {
        name: cls(
            settings.llm_model,
            settings.llm_base_url,
            answer_tokens=settings.llm_answer_tokens,
            timeout_s=settings.llm_timeout_s,
        )
        for name, cls in PROVIDERS.items()
    }
