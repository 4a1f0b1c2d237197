// Package teststack is what the tests and benchmarks share to put real
// streaming traffic on loopback and know exactly what was written:
//
//   - Go servers: the net/http SSE handler ([SSEServer]), a raw
//     close-delimited server ([ServeRaw]), a chunked server that writes
//     through a chosen send syscall ([ChunkedServer]) and the slow client
//     that makes its large writes partial ([SlowGet]), and a server that
//     answers with given writes byte for byte ([WireServer]: another
//     server's output, such as the LLM servers' in package llmwire);
//   - the servers users run, as child processes: Python asyncio (uvicorn
//     with starlette or FastAPI, Debian's packages) and Node (the http
//     module or express from npm) ([StartStack]); each prints a JSON line
//     per request with what it wrote, and can stream another server's
//     events instead of its own ([Replay]);
//   - clients: one that sends chat completions the way the official
//     openai SDKs do ([SDKClient]), a curl runner ([Curl], [CurlWith])
//     and a Node client ([NodeClient]);
//   - TLS: a certificate made when the test runs ([NewTLSCert]) that the
//     servers serve (StackOptions.TLS, [ServeHTTPS]) and the clients
//     trust;
//   - one child-process helper ([StartProc], [Group]): own process group,
//     readiness by line or probe, output captured, SIGTERM then SIGKILL,
//     the group killed when the child exits and signalled only while the
//     child is unreaped (its pid is the group's id), and killed with this
//     process but with no thread of it (package childproc).
//
// Every listener binds 127.0.0.1 and everything a test starts ends in its
// cleanup. Functions that take a testing.TB fail or skip the test; the
// others return errors, for the bench programs.
package teststack
