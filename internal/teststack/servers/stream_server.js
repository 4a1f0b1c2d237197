// An OpenAI-compatible streaming endpoint the way Node servers run one:
// the http module's server, or express on top of it.
//
// POST /v1/chat/completions with {"stream": true} streams TW_EVENTS events,
// the first after TW_THINK_MS, then one every TW_INTERVAL_MS, each its own
// res.write (one chunk of the chunked body), then the end marker
// ("data: [DONE]" in the openai format, a "done": true line in the ollama
// format) and res.end(). Node sends the response head with the first write.
// The query parameters events, think_ms and interval_ms override the
// defaults per request; flush_headers=1 sends the head on its own first
// (res.flushHeaders(), as SSE code does to open the stream at once). {"stream": false} gets one JSON body with a
// Content-Length.
//
// Environment: TW_PORT (0: any free port), TW_FRAMEWORK (http, express),
// TW_FORMAT (openai, ollama), TW_EVENTS, TW_THINK_MS, TW_INTERVAL_MS, and
// TW_TLS_CERT with TW_TLS_KEY to serve HTTPS (the https module: OpenSSL
// linked into node). express is looked up through NODE_PATH.
//
// TW_REPLAY, a JSON file {"media_type": ..., "events": [...], "think_ms":
// N, "interval_ms": N, "headers": [[name, value], ...]}, streams those
// events instead, with those response headers too, for every POST
// whatever its path (another server's bytes, as a Node gateway relays
// them): each its own res.write, the first after think_ms, then one
// every interval_ms, and res.end() an interval after the last (or, with
// "last_tick": N, the last N events and res.end() in one tick, which Node's
// http module sends in one writev); the events are all counted and carry
// their own end, if any.
//
// Stdout, one JSON object per line: first {"ready": true, "port": N, ...}
// once the server listens, then one line per request when its response is
// over, with what the handler wrote: events, body bytes (without the chunked
// framing Node adds), whether the end marker went out, and CLOCK_MONOTONIC
// times (process.hrtime.bigint, the clock BPF programs stamp with) of the
// request, of each event and of the end.
'use strict';

const fs = require('fs');
const http = require('http');

const FRAMEWORK = process.env.TW_FRAMEWORK || 'http';
const FORMAT = process.env.TW_FORMAT || 'openai';
const DEFAULTS = {
  events: Number(process.env.TW_EVENTS || 10),
  think_ms: Number(process.env.TW_THINK_MS || 20),
  interval_ms: Number(process.env.TW_INTERVAL_MS || 10),
  flush_headers: 0,
};
const REPLAY = process.env.TW_REPLAY ? JSON.parse(fs.readFileSync(process.env.TW_REPLAY, 'utf8')) : null;
const PLAIN = '{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}';

const pad3 = (i) => String(i).padStart(3, '0');

// The same bytes as the Go package's OpenAIEvent and OllamaLine.
function event(i) {
  if (FORMAT === 'ollama') {
    return `{"message":{"role":"assistant","content":"tok${pad3(i)}"},"done":false}\n`;
  }
  return `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok${pad3(i)}"}}]}\n\n`;
}

function endMarker() {
  if (FORMAT === 'ollama') {
    return '{"message":{"role":"assistant","content":""},"done":true}\n';
  }
  return 'data: [DONE]\n\n';
}

const now = () => Number(process.hrtime.bigint());
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const report = (rec) => process.stdout.write(JSON.stringify(rec) + '\n');

function readBody(req) {
  return new Promise((resolve, reject) => {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

async function chat(req, res) {
  const start = now();
  const url = new URL(req.url, 'http://localhost');
  const raw = await readBody(req);
  let body;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch (e) {
    res.writeHead(400, { 'Content-Type': 'text/plain' });
    res.end('not JSON\n');
    return;
  }
  const rec = {
    path: url.pathname, model: body.model || '', streamed: REPLAY !== null || Boolean(body.stream),
    user_agent: req.headers['user-agent'] || '', request_bytes: raw.length,
    events: 0, body_bytes: 0, done: false, start_ns: start, event_ns: [],
  };
  if (!rec.streamed) {
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(PLAIN) });
    res.end(PLAIN);
    rec.body_bytes = Buffer.byteLength(PLAIN);
    rec.end_ns = now();
    report(rec);
    return;
  }
  const param = (name) => {
    if (url.searchParams.has(name)) {
      return Number(url.searchParams.get(name));
    }
    if (REPLAY && name !== 'flush_headers') {
      return name === 'events' ? REPLAY.events.length : REPLAY[name];
    }
    return DEFAULTS[name];
  };
  let gone = false;
  res.on('close', () => { gone = !res.writableFinished; });
  const headers = {
    'Content-Type': REPLAY ? REPLAY.media_type : FORMAT === 'ollama' ? 'application/x-ndjson' : 'text/event-stream',
    'Cache-Control': 'no-cache',
  };
  for (const [name, value] of (REPLAY && REPLAY.headers) || []) {
    headers[name] = value;
  }
  res.writeHead(200, headers);
  if (param('flush_headers')) {
    res.flushHeaders();
  }
  try {
    await sleep(param('think_ms'));
    const events = param('events');
    for (let i = 0; i < events && !gone; i++) {
      const data = REPLAY ? REPLAY.events[i % REPLAY.events.length] : event(i);
      rec.event_ns.push(now());
      res.write(data);
      rec.events++;
      rec.body_bytes += Buffer.byteLength(data);
      if (REPLAY && i >= events - (REPLAY.last_tick || 0)) {
        continue;
      }
      await sleep(param('interval_ms'));
    }
    if (!gone && !REPLAY) {
      const data = endMarker();
      res.write(data);
      rec.body_bytes += Buffer.byteLength(data);
    }
    rec.done = !gone;
    res.end();
  } finally {
    rec.end_ns = now();
    report(rec);
  }
}

function app() {
  if (FRAMEWORK === 'express') {
    const express = require('express');
    const a = express();
    const route = (req, res, next) => chat(req, res).catch(next);
    if (REPLAY) {
      a.use((req, res, next) => (req.method === 'POST' ? route(req, res, next) : next()));
    } else {
      a.post('/v1/chat/completions', route);
    }
    return a;
  }
  if (FRAMEWORK !== 'http') {
    throw new Error(`TW_FRAMEWORK must be http or express, not ${FRAMEWORK}`);
  }
  return (req, res) => {
    if (req.method === 'POST' && (REPLAY || req.url.split('?')[0] === '/v1/chat/completions')) {
      chat(req, res).catch((e) => { res.destroy(e); });
      return;
    }
    res.writeHead(404);
    res.end();
  };
}

const TLS = process.env.TW_TLS_CERT
  ? { cert: require('fs').readFileSync(process.env.TW_TLS_CERT), key: require('fs').readFileSync(process.env.TW_TLS_KEY) }
  : null;
const server = TLS ? require('https').createServer(TLS, app()) : http.createServer(app());
server.listen(Number(process.env.TW_PORT || 0), '127.0.0.1', () => {
  report({
    ready: true, port: server.address().port, framework: FRAMEWORK, format: REPLAY ? 'replay' : FORMAT,
    node: process.version, express: FRAMEWORK === 'express' ? require('express/package.json').version : '',
    tls: TLS ? process.versions.openssl : '',
  });
});
process.on('SIGTERM', () => process.exit(0));
