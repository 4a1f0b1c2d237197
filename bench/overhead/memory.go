package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

type memResult struct {
	Idle, Streaming benchutil.Mem
	IdleCPU         float64 // cores, over 10 s with nothing to observe
	StreamingCPU    float64 // cores, over the 12 s with the streams open
	ServerAt        benchutil.Mem
	Connected       string
	Maps            []benchutil.MapStat // with the streams open
	Host            benchutil.HostLoad
}

// memory starts the tokenwire collector and the Go server, measures the
// collector idle (CPU over 10 s starting 2 s after the server, memory at
// the end of those), then with n open streams.
func (e *env) memory(n int) (*memResult, error) {
	m := &memResult{}
	host := benchutil.StartHost()
	coll, err := e.coll.Start(e.procs, *port, false, e.logs)
	if err != nil {
		return nil, err
	}
	defer coll.Stop()
	srv, err := e.startServer("go", *port, false)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	pid := coll.Pid()
	cpuOver := func(d time.Duration) (float64, error) {
		t0 := time.Now()
		c0, err := benchutil.CPUSeconds(pid)
		if err != nil {
			return 0, err
		}
		time.Sleep(d)
		c1, err := benchutil.CPUSeconds(pid)
		return (c1 - c0) / time.Since(t0).Seconds(), err
	}
	time.Sleep(2 * time.Second)
	if m.IdleCPU, err = cpuOver(10 * time.Second); err != nil {
		return nil, err
	}
	if m.Idle, err = benchutil.Memory(pid); err != nil {
		return nil, err
	}
	idle, err := e.procs.Start(teststack.ProcOptions{Name: "idle", Log: e.logs, Lines: true}, e.self, "idle",
		"-addr", e.serverAddr("go"), "-conns", strconv.Itoa(n), "-hold", "120s")
	if err != nil {
		return nil, err
	}
	defer idle.Stop()
	if m.Connected, err = idle.WaitLine(90*time.Second, nil); err != nil {
		return nil, fmt.Errorf("idle connections not established within 90 s: %w", err)
	}
	// Two collection intervals' worth of the streams being open.
	if m.StreamingCPU, err = cpuOver(12 * time.Second); err != nil {
		return nil, err
	}
	if m.Streaming, err = benchutil.Memory(pid); err != nil {
		return nil, err
	}
	if m.ServerAt, err = benchutil.Memory(srv.Pid()); err != nil {
		return nil, err
	}
	m.Maps, _ = benchutil.Maps(pid)
	m.Host = host.Stop()
	return m, nil
}
