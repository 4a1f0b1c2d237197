# A streaming client the way Python programs call an LLM server with the
# standard library: one http.client connection (HTTPS: the ssl module, on
# the system's OpenSSL with a socket BIO) kept alive, requests one after
# another, each response read line by line as it arrives.
#
# Arguments: URL, number of requests, JSON body. Environment: TW_CA, a PEM
# certificate to trust; TW_START_DELAY_MS, a wait before connecting.
#
# Stdout, one JSON object per request, as stream_client.js writes them:
# status, data events before "data: [DONE]", whether that came, the local
# port, and CLOCK_MONOTONIC times (the clock BPF programs stamp with) of
# the request's start, of each event's arrival and of the end.
import http.client
import json
import os
import ssl
import sys
import time
import urllib.parse

url = urllib.parse.urlsplit(sys.argv[1])
requests = int(sys.argv[2]) if len(sys.argv) > 2 else 1
body = (sys.argv[3] if len(sys.argv) > 3 else '{}').encode()


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


time.sleep(int(os.environ.get('TW_START_DELAY_MS') or 0) / 1000)
if url.scheme == 'https':
    ctx = ssl.create_default_context(cafile=os.environ.get('TW_CA') or None)
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=ctx)
else:
    conn = http.client.HTTPConnection(url.hostname, url.port)

for _ in range(requests):
    rec = {'status': 0, 'events': 0, 'done': False, 'local_port': 0, 'sent_ns': now(), 'event_ns': [], 'end_ns': 0}
    conn.request('POST', url.path or '/', body=body, headers={'Content-Type': 'application/json'})
    resp = conn.getresponse()
    rec['status'] = resp.status
    rec['local_port'] = conn.sock.getsockname()[1]
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if line == b'data: [DONE]':
            rec['done'] = True
        elif line.startswith(b'data: '):
            rec['events'] += 1
            rec['event_ns'].append(now())
    rec['end_ns'] = now()
    print(json.dumps(rec), flush=True)
conn.close()
