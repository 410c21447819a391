"""`yantra generate` against the real gRPC server and the tiny model: what it prints is the model's text with
its control characters escaped (services/cli/output.py)."""

from __future__ import annotations

import re

from services.cli import build_parser
from services.cli.output import sanitize
from services.core.server_client import generate_tokens
from services.server.grpc_api import start_grpc

ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what a terminal acts on (newline and tab aside)
PROMPT = "Once upon a time"  # the tiny model's random weights answer it with control characters (checked below)


async def test_generate_prints_the_models_control_characters_escaped(engine, capsys, monkeypatch, tmp_path):
    server, port = await start_grpc(engine, "127.0.0.1:0")
    try:
        addr = f"127.0.0.1:{port}"
        _, raw, _ = await generate_tokens(addr, PROMPT, 48)
        assert ACTING.search(raw), "the premise: this prompt makes the model emit control characters"
        monkeypatch.setenv("YANTRA_SERVER_ADDR", addr)
        args = build_parser().parse_args(["generate", PROMPT, "--max-new-tokens", "48", "--data-dir", str(tmp_path)])
        assert await args.fn(args) == 0
    finally:
        await server.stop(0)
    printed = capsys.readouterr().out
    assert not ACTING.search(printed), repr(printed)
    shown = re.fullmatch(r"(.*)\n\[\d+\.\d tokens/s\]\n", printed, re.S)
    assert shown and shown.group(1) == sanitize(raw), repr(printed)
