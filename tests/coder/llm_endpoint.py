"""A local LLM endpoint for the tests: speaks Gemini's REST shape and OpenAI's chat completions on 127.0.0.1.

`POST /v1beta/models/{model}:generateContent` and `POST /v1/chat/completions` answer with what the test scripted:
`Answer(text, finish)` (a reply in the path's shape), `Status(code)` (an error body), `Blocked()` (a safety block),
`Slow(seconds, then)` (an answer only after the client gave up). Each request takes the next scripted behaviour;
once the script is spent, `default` answers. The answer set the tests serve is committed in llm_answers/.

(Imported by name: pytest puts this directory on sys.path for the tests in it; the e2e test adds it.)
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ANSWERS = Path(__file__).parent / "llm_answers"


def answer_text(name: str) -> str:
    """A committed answer's raw text (what the model 'said')."""
    return (ANSWERS / name).read_text()


@dataclass
class Answer:
    text: str
    finish: str = "STOP"  # Gemini's words; the OpenAI shape maps them (STOP -> stop, MAX_TOKENS -> length)
    prompt_tokens: int = 1200
    answer_tokens: int = 900


@dataclass
class Status:
    code: int
    body: str = '{"error": {"code": 500, "message": "internal error", "status": "INTERNAL"}}'


@dataclass
class Blocked:
    pass


@dataclass
class Slow:
    seconds: float
    then: object = None


@dataclass
class Request:
    path: str
    headers: dict
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def prompt(self) -> str:
        data = self.json
        if "contents" in data:
            return data["contents"][0]["parts"][0]["text"]
        return data["messages"][-1]["content"]


@dataclass
class LlmEndpoint:
    script: list = field(default_factory=list)
    default: object = field(default_factory=lambda: Status(500))
    requests: list[Request] = field(default_factory=list)
    responder: object = None  # (Request) -> behaviour, asked when the script is spent (before `default`)

    def start(self) -> LlmEndpoint:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                request = Request(self.path, dict(self.headers), body)
                endpoint.requests.append(request)
                endpoint.reply(self, request)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def next_behaviour(self, request: Request):
        if self.script:
            return self.script.pop(0)
        if self.responder is not None:
            return self.responder(request)
        return self.default

    def reply(self, handler: BaseHTTPRequestHandler, request: Request) -> None:
        behaviour = self.next_behaviour(request)
        if isinstance(behaviour, Slow):
            time.sleep(behaviour.seconds)
            behaviour = behaviour.then or Status(504)
        gemini = re.fullmatch(r"/v1beta/models/[^/:]+:generateContent", request.path) is not None
        if not gemini and request.path != "/v1/chat/completions":
            behaviour = Status(404, '{"error": "no such path"}')
        if isinstance(behaviour, Status):
            payload, code = behaviour.body.encode(), behaviour.code
        else:
            payload, code = json.dumps(_gemini(behaviour) if gemini else _openai(behaviour)).encode(), 200
        try:
            handler.send_response(code)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:
            pass  # the client gave up (a timeout): nobody reads this


def _gemini(behaviour) -> dict:
    if isinstance(behaviour, Blocked):
        return {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 1200}}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": behaviour.text}]}, "finishReason": behaviour.finish}
        ],
        "usageMetadata": {
            "promptTokenCount": behaviour.prompt_tokens,
            "candidatesTokenCount": behaviour.answer_tokens,
            "totalTokenCount": behaviour.prompt_tokens + behaviour.answer_tokens,
        },
    }


def _openai(behaviour) -> dict:
    if isinstance(behaviour, Blocked):
        message, finish, tokens = {"role": "assistant", "content": None}, "content_filter", (1200, 0)
    else:
        finish = {"STOP": "stop", "MAX_TOKENS": "length"}.get(behaviour.finish, behaviour.finish)
        message, tokens = (
            {"role": "assistant", "content": behaviour.text},
            (behaviour.prompt_tokens, behaviour.answer_tokens),
        )
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)},
    }


def reference_answer(request: Request) -> Answer:
    """The prompt's own reference, answered back (a model that copies the family's template): right for any family."""
    prompt = request.prompt
    start = prompt.index("## Reference")
    body = prompt[prompt.index("\n", start) + 1 : prompt.index("\n\n## Earlier", start)]
    return Answer(body)
