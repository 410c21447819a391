"""The OpenAI-compatible HTTP API against a real server over loopback, serving the live tiny model: the `openai`
client for what clients do, raw HTTP for what they never send (malformed JSON, a body too large, a lying head)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from openai import AsyncOpenAI
from server_fixtures import Outcomes

from services.core.nats_launcher import free_port, start_nats
from services.core.settings import Settings, settings_problem
from services.server.grpc_api import AddressUnavailable
from services.server.http_api import MAX_BODY_BYTES, start_http
from services.server.prometheus import Exporter
from services.server.swaps import SwapRegistry

ROOT = Path(__file__).resolve().parents[2]
MODEL = "tiny-qwen2"
CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
NAN, INF = float("nan"), float("inf")  # json.dumps writes them as NaN and Infinity, which some clients send


@pytest.fixture(scope="module")
async def http(engine):
    """The HTTP API on a free port, its /metrics the Prometheus exporter's registry (as the server wires it)."""
    exporter = Exporter(engine, SwapRegistry())
    api, port = await start_http(engine, "127.0.0.1:0", exporter.registry)
    yield api, port
    await api.close(0)
    engine.stats.observers.remove(exporter)


@pytest.fixture
async def client(http):
    _, port = http
    async with AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
def outcomes(engine):
    seen = Outcomes()
    engine.stats.observers.append(seen)
    yield seen.seen
    engine.stats.observers.remove(seen)


async def _idle(engine, seconds: float = 10.0) -> None:
    """Wait until the engine generates nothing (a cancelled request frees its slot at its next step)."""
    for _ in range(int(seconds / 0.02)):
        if engine.active == 0:
            return
        await asyncio.sleep(0.02)
    assert engine.active == 0


async def _raw(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `data` as it is; (status, headers, body) of the answer, read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    if headers.get("transfer-encoding") == "chunked":
        body = _dechunk(body)
    return int(status_line.split(" ")[1]), headers, body


def _dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            assert rest == b"\r\n", rest  # the last chunk, no trailers
            return out
        out, body = out + rest[:n], rest[n + 2 :]


def _head(path: str, length: int, **headers: str) -> bytes:
    head = {"Host": "test", "Content-Type": "application/json", "Content-Length": str(length), "Connection": "close",
            **headers}  # fmt: skip
    return f"POST {path} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode() + b"\r\n"


def _post(path: str, body: bytes | dict, **headers: str) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _head(path, len(data), **headers) + data


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode()


# ------------------------------------------------------------------ what clients do


async def test_completions_whole_and_streamed_with_the_openai_client(engine, client):
    expected, _ = await engine.exclusive(engine.decode, engine.encode("Hello"), 6)
    whole = await client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, temperature=0)
    assert whole.object == "text_completion" and whole.model == MODEL and whole.id.startswith("cmpl-")
    (choice,) = whole.choices
    assert choice.text == engine.tokenizer.decode(expected) and choice.finish_reason == "length"
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens, whole.usage.total_tokens) == (5, 6, 11)

    stream = await client.completions.create(
        model=MODEL, prompt="Hello", max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6  # include_usage: a last chunk
    assert len({c.id for c in chunks}) == 1

    by_ids = await client.completions.create(model=MODEL, prompt=engine.encode("Hello"), max_tokens=6, temperature=0)
    assert by_ids.choices[0].text == choice.text  # token ids as the prompt


async def test_chat_whole_and_streamed_with_the_openai_client(engine, client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello"}]
    # The presets' byte tokenizer has no chat template: the messages are "role: content" lines
    plain = await client.completions.create(
        model=MODEL, prompt="system: be brief\nuser: Hello\nassistant:", max_tokens=5, temperature=0
    )
    whole = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5, temperature=0)
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-")
    (choice,) = whole.choices
    assert choice.message.role == "assistant" and choice.message.content == plain.choices[0].text
    assert choice.finish_reason == "length" and whole.usage.completion_tokens == 5

    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_completion_tokens=5, temperature=0, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == choice.message.content
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].object == "chat.completion.chunk"


async def test_sampling_with_a_seed_repeats_and_a_stop_string_ends_the_text(client):
    sampled = dict(model=MODEL, prompt="Hello", max_tokens=12, temperature=1.2, top_p=0.95, seed=11)
    first = await client.completions.create(**sampled, extra_body={"ignore_eos": True})
    again = await client.completions.create(**sampled, extra_body={"ignore_eos": True})
    text = first.choices[0].text
    assert text == again.choices[0].text and first.usage.completion_tokens == 12
    stop = text[3:5]
    cut = await client.completions.create(**sampled, stop=stop)
    assert cut.choices[0].text == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"


async def test_models_health_and_metrics(engine, http, client):
    _, port = http
    (card,) = (await client.models.list()).data
    assert card.id == MODEL and card.object == "model" and card.max_model_len == engine.loaded.max_positions
    assert (await client.models.retrieve(MODEL)).id == MODEL
    with pytest.raises(openai.NotFoundError) as err:
        await client.models.retrieve("gpt-4")
    assert err.value.body["code"] == "model_not_found"

    status, _, body = await _raw(port, _get("/health"))
    health = json.loads(body)
    assert status == 200 and health["status"] == "ok" and health["model"] == MODEL
    assert health["max_requests"] == engine.max_active

    await client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    status, headers, body = await _raw(port, _get("/metrics"))
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'yantra_requests_total{outcome="ok"}' in body.decode() and "yantra_generated_tokens_total" in body.decode()


async def test_a_stream_is_server_sent_events_in_chunks_ending_with_done(http):
    _, port = http
    status, headers, body = await _raw(
        port, _post("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True})
    )
    assert status == 200 and headers["content-type"] == "text/event-stream" and "content-length" not in headers
    events = body.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: ") for e in events[:-1])
    assert json.loads(events[-3].removeprefix("data: "))["choices"][0]["finish_reason"] == "length"


async def test_a_kept_alive_connection_takes_request_after_request_and_curls_expect_continue(http):
    _, port = http
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(2):
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: test\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            assert head.startswith(b"HTTP/1.1 200 OK") and json.loads(await reader.readexactly(length))["data"]
        body = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
        writer.write(_head("/v1/completions", len(body), Expect="100-continue"))  # as curl sends a longer body
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body is sent
        writer.write(body)
        assert (await reader.read()).startswith(b"HTTP/1.1 200 OK")
    finally:
        writer.close()


# ------------------------------------------------------------------ bad input: a status and an OpenAI error body


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "says"),
    [
        ("/v1/completions", {"prompt": "x" * 600, "max_tokens": 4}, 400, "prompt", "leave no room in the model's 512"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 0}, 400, "max_tokens", "max_tokens must be 1..510"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": -5}, 400, "max_tokens", "got -5"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 10**12}, 400, "max_tokens", "must be 1..510"),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": "16"}, 400, "max_tokens", "valid integer"),
        ("/v1/completions", {"prompt": "Hi", "temperature": -1}, 400, "temperature", "temperature must be 0..100"),
        ("/v1/completions", {"prompt": "Hi", "top_p": 0}, 400, "top_p", "top_p must be in (0, 1]"),
        ("/v1/completions", {"prompt": "Hi", "top_p": 1.5}, 400, "top_p", "top_p must be in (0, 1]"),
        ("/v1/completions", {"prompt": "Hi", "top_p": -0.1}, 400, "top_p", "top_p must be in (0, 1], got -0.1"),
        ("/v1/completions", {"prompt": "Hi", "top_p": NAN}, 400, "top_p", "top_p must be in (0, 1], got nan"),
        (
            "/v1/completions",
            {"prompt": "Hi", "temperature": NAN},
            400,
            "temperature",
            "must be 0..100 (0 = greedy), got nan",
        ),
        (
            "/v1/completions",
            {"prompt": "Hi", "temperature": INF},
            400,
            "temperature",
            "must be 0..100 (0 = greedy), got inf",
        ),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 2**70}, 400, "max_tokens", "must be 1..510"),
        (
            "/v1/completions",
            {"prompt": "Hi", "max_tokens": 511},
            400,
            "max_tokens",
            "must fit the model's 512 positions",
        ),
        ("/v1/completions", {"prompt": "Hi", "seed": 2**70}, 400, "seed", "less than or equal"),
        ("/v1/completions", {"prompt": "Hi", "n": 2}, 400, "n", "not supported"),
        ("/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt", "one prompt per request"),
        ("/v1/completions", {"prompt": ""}, 400, "prompt", "the prompt is empty"),
        ("/v1/completions", {"max_tokens": 4}, 400, "prompt", "Field required"),
        ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt", "outside the vocabulary"),
        ("/v1/completions", {"prompt": "Hi", "stop": [f"s{i}" for i in range(9)]}, 400, "stop", "at most 8 stop"),
        ("/v1/completions", {"prompt": "Hi", "model": "gpt-4"}, 404, "model", "'gpt-4' is not served here"),
        ("/v1/completions", b'{"prompt": "Hi",', 400, None, "not valid JSON"),
        ("/v1/completions", b'"Hi"', 400, None, "must be a JSON object"),
        ("/v1/completions", b"", 400, None, "the body is empty"),
        ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, None, "not valid JSON"),
        (CHAT, {"messages": []}, 400, "messages", "at least 1 item"),
        (CHAT, {"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role", "'user'"),
        (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages.0.content", "text"),
        (CHAT, {"messages": [{"role": "user", "content": "x" * 600}]}, 400, "messages", "no room"),
        (CHAT, {"messages": HI, "max_tokens": 0}, 400, "max_tokens", "max_tokens must be 1.."),
        (CHAT, {"messages": HI, "max_completion_tokens": 9999}, 400, "max_completion_tokens", "must be 1.."),
        (CHAT, {"messages": HI, "tools": [{"type": "function"}]}, 400, "tools", "not supported"),
        (CHAT, {"messages": HI, "temperature": -1}, 400, "temperature", "temperature must be 0..100"),
        (CHAT, {"messages": HI, "top_p": NAN, "stream": True}, 400, "top_p", "got nan"),  # before any event is sent
        ("/v1/completions", {"prompt": "x" * 600, "stream": True}, 400, "prompt", "leave no room"),
        (CHAT, {"messages": HI, "model": "llama-70b"}, 404, "model", "'llama-70b' is not served here"),
        ("/v1/nope", {}, 404, None, "no endpoint POST /v1/nope"),
    ],
)
async def test_bad_input_gets_its_status_and_an_openai_error_body(
    engine, http, outcomes, path, body, status, param, says
):
    _, port = http
    code, headers, raw = await _raw(port, _post(path, body))
    error = json.loads(raw)["error"]
    assert code == status and headers["content-type"] == "application/json", (code, raw)
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    assert says in error["message"], error["message"]
    assert "\n" not in error["message"] and "Traceback" not in error["message"]  # one line
    assert engine.active == 0
    if path != "/v1/nope":
        assert outcomes == ["bad_request"]  # counted as gRPC's refusals are
    # nothing held: the next request is served
    code, _, raw = await _raw(port, _post("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "temperature": 0}))
    assert code == 200 and json.loads(raw)["usage"]["completion_tokens"] > 0, raw


async def test_bad_input_through_the_openai_client_raises_its_typed_errors(client):
    with pytest.raises(openai.BadRequestError) as err:
        await client.completions.create(model=MODEL, prompt="Hi", max_tokens=0)
    assert err.value.status_code == 400 and err.value.param == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=-1)
    assert err.value.param == "temperature"


async def test_a_body_too_large_is_413_without_being_read(http, outcomes):
    _, port = http
    status, headers, body = await _raw(port, _head("/v1/completions", MAX_BODY_BYTES + 1))  # no body sent at all
    assert (
        status == 413
        and headers["connection"] == "close"
        and "at most 4,194,304" in json.loads(body)["error"]["message"]
    )
    assert outcomes == ["bad_request"]


@pytest.mark.parametrize(
    ("request_", "status", "says"),
    [
        (b"GET /v1/completions HTTP/1.1\r\nConnection: close\r\n\r\n", 405, "takes POST, not GET"),
        (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411, "Content-Length"),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: ten\r\n\r\n", 400, "Content-Length"),
        (b"HELLO\r\n\r\n", 400, "request line"),
        (b"GET /" + b"x" * 10_000 + b" HTTP/1.1\r\n\r\n", 431, "longer than 8192"),
    ],
    ids=["method", "chunked", "length", "line", "long"],
)
async def test_a_request_that_is_not_good_http_gets_its_status(http, request_, status, says):
    _, port = http
    code, _, body = await _raw(port, request_)
    assert code == status and says in json.loads(body)["error"]["message"]


async def test_a_full_server_answers_429_and_takes_requests_again_after(engine, client, outcomes):
    engine.max_active = 1
    try:
        long = await client.completions.create(
            model=MODEL, prompt="Hello", max_tokens=400, stream=True, extra_body={"ignore_eos": True}
        )
        await anext(aiter(long))  # being generated
        assert engine.active == 1
        with pytest.raises(openai.RateLimitError) as err:
            await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert err.value.code == "rate_limit_exceeded" and "retry later" in err.value.message
        assert err.value.response.headers["retry-after"] == "1"
        await long.close()
        await _idle(engine)
    finally:
        engine.max_active = 64
    assert (await client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)).choices[0].finish_reason
    assert outcomes[:2] == ["overloaded", "cancelled"]


async def test_while_not_ready_health_and_generation_answer_503(http, client):
    api, port = http
    api.ready = False
    try:
        status, headers, body = await _raw(port, _get("/health"))
        assert status == 503 and headers["retry-after"] == "1" and json.loads(body)["error"]["code"] == "not_ready"
        with pytest.raises(openai.InternalServerError) as err:
            await client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
        assert err.value.status_code == 503
        assert (await client.models.list()).data  # what needs no model answers still
    finally:
        api.ready = True


async def test_a_failure_inside_the_model_is_a_500_or_an_error_event_never_a_traceback(engine, http, monkeypatch):
    _, port = http

    async def failing(ids, max_new, **kwargs):
        yield [65]
        raise RuntimeError("CUDA error: an illegal memory access")

    monkeypatch.setattr(engine, "generate", failing)
    status, _, body = await _raw(port, _post("/v1/completions", {"prompt": "Hi", "max_tokens": 4}))
    error = json.loads(body)["error"]
    assert status == 500 and error["type"] == "server_error"
    assert error["message"] == "generation failed: RuntimeError: CUDA error: an illegal memory access"
    status, _, body = await _raw(port, _post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "stream": True}))
    events = [e.removeprefix("data: ") for e in body.decode().split("\n\n") if e]
    assert status == 200 and json.loads(events[0])["choices"][0]["text"] == "A"  # sent before the failure
    assert "illegal memory access" in json.loads(events[1])["error"]["message"] and events[2] == "[DONE]"


# ------------------------------------------------------------------ a client that goes frees its slot


async def test_a_streaming_client_that_disconnects_frees_its_slot(engine, client, outcomes):
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=480, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    got = 0
    async for _ in stream:
        got += 1
        if got == 3:
            break
    assert engine.active == 1
    await stream.close()  # the connection closes mid-stream
    await _idle(engine)
    assert outcomes == ["cancelled"]


async def test_a_client_that_disconnects_before_a_whole_answer_frees_its_slot(engine, http, outcomes):
    _, port = http
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_post("/v1/completions", {"prompt": "Hi", "max_tokens": 500, "ignore_eos": True}))
    await writer.drain()
    for _ in range(500):
        if engine.active:
            break
        await asyncio.sleep(0.01)
    assert engine.active == 1
    writer.close()
    await _idle(engine)
    assert outcomes == ["cancelled"]


# ------------------------------------------------------------------ chat templates, settings, the process


def test_a_tokenizer_with_a_chat_template_renders_the_chat_with_it():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from services.server.http_openai import chat_prompt
    from services.server.requests import BadArgument
    from services.server.tokenizer import HFTokenizer

    words = ["[UNK]", "<s>", "hi", "there"]
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    template = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                "{% if add_generation_prompt %}assistant{% endif %}")  # fmt: skip
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", unk_token="[UNK]", chat_template=template)
    text, encode = chat_prompt(HFTokenizer(tok), [{"role": "user", "content": "hi there"}])
    assert text == "<s>user hi there assistant"
    assert encode(text) == [1, 0, 2, 3, 0]  # the template's <s> once: no special tokens added again
    tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(BadArgument, match="chat template refused these messages: roles must alternate"):
        chat_prompt(HFTokenizer(tok), [{"role": "user", "content": "hi"}])


def test_the_http_address_is_a_setting_checked_like_the_metrics_one(monkeypatch):
    from pydantic import ValidationError

    monkeypatch.setenv("YANTRA_HTTP_ADDR", "0.0.0.0:70000")
    with pytest.raises(ValidationError) as err:
        Settings.from_env()
    assert settings_problem(err.value).startswith("YANTRA_HTTP_ADDR=0.0.0.0:70000:")
    monkeypatch.setenv("YANTRA_HTTP_ADDR", "")
    assert Settings.from_env().http_addr == ""  # off
    monkeypatch.setenv("YANTRA_HTTP_ADDR", "127.0.0.1:8000")
    assert Settings.from_env().env()["YANTRA_HTTP_ADDR"] == "127.0.0.1:8000"


async def test_a_port_already_held_is_refused_naming_the_setting(engine, http):
    _, port = http
    with pytest.raises(AddressUnavailable, match="set YANTRA_HTTP_ADDR to a free address"):
        await start_http(engine, f"127.0.0.1:{port}")


async def test_the_server_process_serves_http_once_ready_and_stops_on_sigterm(tmp_path):
    nats = start_nats(tmp_path / "nats", log_file=tmp_path / "nats.log")
    http_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("YANTRA_") and k != "NATS_URL"}
    env |= {"YANTRA_DEVICE": "cpu", "NATS_URL": nats.url, "YANTRA_DATA_DIR": str(tmp_path / "data"),
            "YANTRA_SERVER_ADDR": f"127.0.0.1:{free_port()}", "YANTRA_HTTP_ADDR": f"127.0.0.1:{http_port}"}  # fmt: skip
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.server"], cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        for _ in range(600):
            try:
                status, _, _ = await _raw(http_port, _get("/health"))
            except OSError:
                status = 0
            if status == 200 or proc.poll() is not None:
                break
            assert status in (0, 503)  # not listening yet, or listening while the swaps are restored
            await asyncio.sleep(0.1)
        assert status == 200, log_path.read_text()
        async with AsyncOpenAI(base_url=f"http://127.0.0.1:{http_port}/v1", api_key="-", max_retries=0) as c:
            reply = await c.completions.create(model=MODEL, prompt="Hello", max_tokens=3)
        assert reply.usage.completion_tokens == 3
        _, _, metrics = await _raw(http_port, _get("/metrics"))
        assert b'yantra_requests_total{outcome="ok"} 1.0' in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        out = log_path.read_text()
        assert f"OpenAI-compatible HTTP API on http://127.0.0.1:{http_port}/v1" in out and "Traceback" not in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        nats.stop()
