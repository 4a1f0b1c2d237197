// A streaming client the way Node apps call an LLM server: the https (or
// http) module with one keep-alive agent, requests one after another, each
// response read event by event as it arrives.
//
// Arguments: URL, number of requests, JSON body. Environment: TW_CA, a PEM
// certificate to trust; TW_START_DELAY_MS, a wait before connecting.
//
// Stdout, one JSON object per request: status, data events before
// "data: [DONE]", whether that came, the local port, and CLOCK_MONOTONIC
// times (process.hrtime.bigint, the clock BPF programs stamp with) of the
// request's start, of each event's arrival and of the end.
'use strict';

const fs = require('fs');

const url = new URL(process.argv[2]);
const requests = Number(process.argv[3] || 1);
const body = process.argv[4] || '{}';
const mod = url.protocol === 'https:' ? require('https') : require('http');
const agent = new mod.Agent({ keepAlive: true, maxSockets: 1 });
const ca = process.env.TW_CA ? fs.readFileSync(process.env.TW_CA) : undefined;
const now = () => Number(process.hrtime.bigint());

function one() {
  return new Promise((resolve, reject) => {
    const rec = { status: 0, events: 0, done: false, local_port: 0, sent_ns: now(), event_ns: [], end_ns: 0 };
    const req = mod.request(url, {
      method: 'POST', agent, ca,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
    }, (res) => {
      rec.status = res.statusCode;
      rec.local_port = res.socket.localPort;
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buf += d;
        for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (line === 'data: [DONE]') {
            rec.done = true;
          } else if (line.startsWith('data: ')) {
            rec.events++;
            rec.event_ns.push(now());
          }
        }
      });
      res.on('end', () => { rec.end_ns = now(); resolve(rec); });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

(async () => {
  await new Promise((r) => setTimeout(r, Number(process.env.TW_START_DELAY_MS || 0)));
  for (let i = 0; i < requests; i++) {
    process.stdout.write(JSON.stringify(await one()) + '\n');
  }
  agent.destroy();
})().catch((e) => { console.error(e); process.exit(1); });
