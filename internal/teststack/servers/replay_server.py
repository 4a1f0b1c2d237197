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
"interval_ms": N}: the first event after think_ms, then one every
interval_ms.

Stdout, one JSON object per line: first {"ready": true, "port": N, ...}
once the socket listens, then one line per request when its response is
over (the fields of the Go package's Report), with CLOCK_MONOTONIC times
(time.monotonic_ns, the clock BPF programs stamp with).
"""

import asyncio
import json
import os
import socket
import sys
import time

import uvicorn

FRAMEWORK = os.environ.get("TW_FRAMEWORK", "starlette")
with open(os.environ["TW_REPLAY"]) as f:
    REPLAY = json.load(f)


def report(rec):
    sys.stdout.write(json.dumps(rec, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def stream(rec):
    try:
        await asyncio.sleep(REPLAY["think_ms"] / 1000)
        for i, ev in enumerate(REPLAY["events"]):
            if i > 0:
                await asyncio.sleep(REPLAY["interval_ms"] / 1000)
            data = ev.encode()
            rec["event_ns"].append(time.monotonic_ns())
            yield data
            rec["events"] += 1
            rec["body_bytes"] += len(data)
        rec["done"] = True
    finally:
        rec["end_ns"] = time.monotonic_ns()
        report(rec)


async def replay(request):
    start = time.monotonic_ns()
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    rec = {
        "path": request.url.path,
        "model": body.get("model", "") if isinstance(body, dict) else "",
        "streamed": True,
        "user_agent": request.headers.get("user-agent", ""),
        "request_bytes": len(raw),
        "events": 0,
        "body_bytes": 0,
        "done": False,
        "start_ns": start,
        "event_ns": [],
    }
    return StreamingResponse(stream(rec), media_type=REPLAY["media_type"])


if FRAMEWORK == "fastapi":
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    app = FastAPI()

    @app.post("/{path:path}")
    async def replay_route(request: Request):
        return await replay(request)

elif FRAMEWORK == "starlette":
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    app = Starlette(routes=[Route("/{path:path}", replay, methods=["POST"])])
else:
    sys.exit("TW_FRAMEWORK must be starlette or fastapi, not %r" % FRAMEWORK)


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("TW_PORT", "0"))))
    sock.listen(1024)
    report({"ready": True, "port": sock.getsockname()[1], "framework": FRAMEWORK, "format": "replay",
            "uvicorn": uvicorn.__version__, "python": sys.version.split()[0]})
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
