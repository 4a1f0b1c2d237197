"""What the Python test servers (stream_server.py, replay_server.py) share:
the ASGI app of TW_FRAMEWORK (starlette, or FastAPI) with one POST route,
the per-request record they report, and serving on uvicorn.

The servers import it from their own directory: the Go package writes it
beside them.
"""

import asyncio
import faulthandler
import json
import os
import socket
import sys
import time

import uvicorn

FRAMEWORK = os.environ.get("TW_FRAMEWORK", "starlette")

# A server that dies of a fault says where, on stderr (the test's log).
faulthandler.enable()


def report(rec):
    """One JSON object on a line of stdout, flushed: the Go side reads them
    as they come."""
    sys.stdout.write(json.dumps(rec, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def read_request(request):
    """The request's arrival (CLOCK_MONOTONIC), its body, and the body as
    JSON (None when it is not JSON)."""
    start = time.monotonic_ns()
    raw = await request.body()
    try:
        return start, raw, json.loads(raw)
    except ValueError:
        return start, raw, None


def new_record(request, raw, start, model, streamed):
    """A request's record (the fields of the Go package's Report), before its
    response: the events, their CLOCK_MONOTONIC times and the end are
    filled in as the response goes out."""
    return {
        "path": request.url.path,
        "model": model,
        "streamed": streamed,
        "user_agent": request.headers.get("user-agent", ""),
        "request_bytes": len(raw),
        "events": 0,
        "body_bytes": 0,
        "done": False,
        "start_ns": start,
        "event_ns": [],
    }


async def respond(rec, events, think, interval, end=None):
    """Yields each of events (strings) as its own body chunk, the first
    after think seconds, the others interval apart, then end (not counted as
    an event) interval after the last, when given; counts what it handed
    over in rec, each event once the server has taken it, and reports rec
    when the response is over, however it ends."""
    try:
        await asyncio.sleep(think)
        for i, ev in enumerate(events):
            if i > 0:
                await asyncio.sleep(interval)
            data = ev.encode()
            rec["event_ns"].append(time.monotonic_ns())
            yield data
            rec["events"] += 1
            rec["body_bytes"] += len(data)
        if end is not None:
            await asyncio.sleep(interval)
            data = end.encode()
            yield data
            rec["body_bytes"] += len(data)
        rec["done"] = True
    finally:
        rec["end_ns"] = time.monotonic_ns()
        report(rec)


def make_app(path, handler):
    """An app of TW_FRAMEWORK that answers POST path with handler(request).
    The responses are starlette's either way (FastAPI's are the same
    classes)."""
    if FRAMEWORK == "fastapi":
        from fastapi import FastAPI, Request

        app = FastAPI()

        @app.post(path)
        async def route(request: Request):
            return await handler(request)

        return app
    if FRAMEWORK == "starlette":
        from starlette.applications import Starlette
        from starlette.routing import Route

        return Starlette(routes=[Route(path, handler, methods=["POST"])])
    sys.exit("TW_FRAMEWORK must be starlette or fastapi, not %r" % FRAMEWORK)


def serve(app, ready, **uvicorn_options):
    """Listens on 127.0.0.1:TW_PORT (0: any free port), reports
    {"ready": true, "port": N, ...ready} and serves app on uvicorn."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(os.environ.get("TW_PORT", "0"))))
    sock.listen(1024)
    # Connections made from here on wait in the backlog until uvicorn
    # accepts them: ready before serve() is not too early.
    report({"ready": True, "port": sock.getsockname()[1], "framework": FRAMEWORK,
            "uvicorn": uvicorn.__version__, "python": sys.version.split()[0], **ready})
    # Info: uvicorn says on stderr when a signal makes it shut down, which
    # it does quietly at "warning"; no line per request (access_log).
    config = uvicorn.Config(app, log_level="info", access_log=False, lifespan="off", **uvicorn_options)
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
