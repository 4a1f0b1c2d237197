"""An OpenAI-compatible streaming endpoint the way Python inference servers
run one: an ASGI app (starlette, or FastAPI) on uvicorn, asyncio.

POST /v1/chat/completions with {"stream": true} streams TW_EVENTS events,
the first after TW_THINK_MS, then one every TW_INTERVAL_MS, each handed to
the server as its own body chunk, then the end marker ("data: [DONE]" in the
openai format, a "done": true line in the ollama format). The query
parameters events, think_ms and interval_ms override the defaults per
request. {"stream": false} gets one JSON body with a Content-Length.

Environment: TW_PORT (0: any free port), TW_FRAMEWORK (starlette, fastapi),
TW_FORMAT (openai, ollama), TW_EVENTS, TW_THINK_MS, TW_INTERVAL_MS, and
TW_TLS_CERT with TW_TLS_KEY to serve HTTPS (uvicorn's ssl_certfile and
ssl_keyfile: Python's ssl module on asyncio, OpenSSL's memory BIOs).

Stdout, one JSON object per line: first {"ready": true, "port": N, ...}
once the socket listens, then one line per request when its response is
over, with what the app handed to the server: events, body bytes (without
the chunked framing the server adds), whether the end marker went out, and
CLOCK_MONOTONIC times (time.monotonic_ns, the clock BPF programs stamp
with) of the request, of each event and of the end.
"""

import os
import time

from starlette.responses import PlainTextResponse, Response, StreamingResponse

from asgi_common import make_app, new_record, read_request, report, respond, serve

FORMAT = os.environ.get("TW_FORMAT", "openai")
DEFAULTS = {
    "events": int(os.environ.get("TW_EVENTS", "10")),
    "think_ms": float(os.environ.get("TW_THINK_MS", "20")),
    "interval_ms": float(os.environ.get("TW_INTERVAL_MS", "10")),
}
PLAIN = b'{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}'


def event(i):
    # The same bytes as the Go package's OpenAIEvent and OllamaLine.
    if FORMAT == "ollama":
        return '{"message":{"role":"assistant","content":"tok%03d"},"done":false}\n' % i
    return 'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok%03d"}}]}\n\n' % i


def end_marker():
    if FORMAT == "ollama":
        return '{"message":{"role":"assistant","content":""},"done":true}\n'
    return "data: [DONE]\n\n"


def param(request, name):
    v = request.query_params.get(name)
    return float(v) if v is not None else DEFAULTS[name]


async def chat(request):
    start, raw, body = await read_request(request)
    if body is None:
        return PlainTextResponse(b"not JSON\n", status_code=400)
    rec = new_record(request, raw, start, body.get("model", ""), bool(body.get("stream")))
    if not rec["streamed"]:
        rec["body_bytes"] = len(PLAIN)
        rec["end_ns"] = time.monotonic_ns()
        report(rec)
        return Response(PLAIN, media_type="application/json")
    media = "application/x-ndjson" if FORMAT == "ollama" else "text/event-stream"
    events = (event(i) for i in range(int(param(request, "events"))))
    gen = respond(rec, events, param(request, "think_ms") / 1000, param(request, "interval_ms") / 1000, end_marker())
    return StreamingResponse(gen, media_type=media, headers={"Cache-Control": "no-cache"})


app = make_app("/v1/chat/completions", chat)


def main():
    serve(app, {"format": FORMAT, "tls": bool(os.environ.get("TW_TLS_CERT"))},
          ssl_certfile=os.environ.get("TW_TLS_CERT"), ssl_keyfile=os.environ.get("TW_TLS_KEY"))


if __name__ == "__main__":
    main()
