"""A streaming endpoint that hands uvicorn the events an inference server
would: an ASGI app (starlette, or FastAPI) on uvicorn, asyncio, streaming
the events of TW_REPLAY for every POST, whatever its path.

vLLM, SGLang and most Python inference servers are such apps: they yield
one event string per chunk to a StreamingResponse, and uvicorn frames each
as one HTTP/1.1 chunk in one write. Given those servers' event strings (the
Go package internal/teststack/llmwire holds them), this server puts their
bytes on the wire as they do.

Environment: TW_PORT (0: any free port), TW_FRAMEWORK (starlette, fastapi),
TW_REPLAY: a JSON file {"media_type": ..., "events": [...], "think_ms": N,
"interval_ms": N, "headers": [[name, value], ...]}: the first event after
think_ms, then one every interval_ms, with those response headers.

Stdout, one JSON object per line: first {"ready": true, "port": N, ...}
once the socket listens, then one line per request when its response is
over (the fields of the Go package's Report), with CLOCK_MONOTONIC times
(time.monotonic_ns, the clock BPF programs stamp with).
"""

import json
import os

from starlette.responses import StreamingResponse

from asgi_common import make_app, new_record, read_request, respond, serve

with open(os.environ["TW_REPLAY"]) as f:
    REPLAY = json.load(f)


async def replay(request):
    start, raw, body = await read_request(request)
    model = body.get("model", "") if isinstance(body, dict) else ""
    rec = new_record(request, raw, start, model, True)
    gen = respond(rec, REPLAY["events"], REPLAY["think_ms"] / 1000, REPLAY["interval_ms"] / 1000)
    return StreamingResponse(gen, media_type=REPLAY["media_type"], headers=dict(REPLAY.get("headers") or []))


app = make_app("/{path:path}", replay)


def main():
    serve(app, {"format": "replay"})


if __name__ == "__main__":
    main()
