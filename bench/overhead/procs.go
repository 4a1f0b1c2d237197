package main

// Starting a variant's children: the collector (none for baseline) and
// the SSE server, each checked before the load starts. The orchestrator's
// teststack.Group stops whatever is left on a failure or a signal.

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// startCollector starts the collector for a variant (nil for baseline),
// waits until its health check answers and checks that it holds BPF
// programs exactly when it should: the tokenwire collector must (or there
// is no BPF time to report), the interceptor's must not (its config must
// not have started the tokenwire receiver in some other pipeline). Its
// log is a file of its own (LogPath), to count what its debug exporter
// saw (countExported).
func (e *env) startCollector(variant string) (*teststack.Proc, error) {
	var args []string
	switch variant {
	case "tokenwire":
		args = e.twArgs
	case "interceptor":
		args = e.icArgs
	default:
		return nil, nil
	}
	log, err := os.CreateTemp(e.tmp, "collector-"+variant+"-*.log")
	if err != nil {
		return nil, err
	}
	log.Close()
	c, err := e.procs.Start(teststack.ProcOptions{Name: "collector " + variant, LogPath: log.Name()}, *collectorBin, args...)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*teststack.Proc, error) {
		c.Stop()
		fmt.Fprintln(e.logs, c.Tail(60))
		return nil, err
	}
	if err := c.WaitReady(60*time.Second, "healthy health check", teststack.HTTPOK(e.healthURL())); err != nil {
		return fail(err)
	}
	time.Sleep(time.Second) // let the receiver settle after Start
	if done, werr := c.Exited(); done {
		return fail(fmt.Errorf("collector exited after start: %v", werr))
	}
	ps, err := benchutil.Programs(c.Pid())
	if err != nil {
		return fail(fmt.Errorf("collector's BPF programs: %w", err))
	}
	if variant == "tokenwire" && len(ps) == 0 {
		return fail(errors.New("the tokenwire collector holds no BPF programs"))
	}
	if variant == "interceptor" && len(ps) > 0 {
		return fail(fmt.Errorf("the interceptor's collector holds %d BPF programs: is tokenwire in another pipeline of %s?", len(ps), *baseConfig))
	}
	return c, nil
}

// startServer starts the SSE server (instrumented for the interceptor
// variant) and waits for its "ready" line.
func (e *env) startServer(variant string) (*teststack.Proc, error) {
	args := []string{"server", "-addr", e.serverAddr(), "-interval", interval.String()}
	if variant == "interceptor" {
		args = append(args, "-otlp", e.otlpEndpoint())
	}
	c, err := e.procs.Start(teststack.ProcOptions{Name: "server", Log: e.logs, Lines: true}, e.self, args...)
	if err != nil {
		return nil, err
	}
	if _, err := c.WaitLine(30*time.Second, func(l string) bool { return l == "ready" }); err != nil {
		c.Stop()
		return nil, fmt.Errorf("server did not start: %w", err)
	}
	return c, nil
}

// exited reports whether a child has ended.
func exited(p *teststack.Proc) bool {
	done, _ := p.Exited()
	return done
}
