package stream

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// leftovers fails the test when anything the tracers opened since base is
// still there.
func leftovers(t *testing.T, base *bpftest.Baseline, perf int, events string) {
	t.Helper()
	objs, err := base.WaitGone(10 * time.Second)
	if err != nil || !objs.Empty() {
		t.Errorf("left behind: %v (%v)", objs, err)
	}
	if n := bpftest.PerfEventFDs(t); n != perf {
		t.Errorf("%d perf event descriptors, %d before", n, perf)
	}
	if now := bpftest.UprobeEvents(); now != events {
		t.Errorf("tracefs uprobe events now %q, before %q", now, events)
	}
}

// Eight tracers in a row attach uprobes to a running TLS server, see a
// stream now and then, and close: nothing of theirs stays, and the server
// is none the worse. Every other one probes the shared libssl for every
// process instead (streams.tls.system_wide): the server is then read
// through those uprobes, with none of its own.
func TestTLSUprobesLeaveNothingBehind(t *testing.T) {
	bpftest.Require(t)
	lib := teststack.RequireSharedLibSSL(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeStack(t, teststack.StackStarlette, teststack.StackOptions{Events: 2, TLS: cert})
	base, err := bpftest.NewBaseline()
	if err != nil {
		t.Fatal(err)
	}
	perf, events := bpftest.PerfEventFDs(t), bpftest.UprobeEvents()
	curl := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := teststack.CurlWith(ctx, teststack.CurlOptions{CACert: cert.CertFile}, srv.URL+"/v1/chat/completions", tlsBody)
		if err != nil || res.Status != 200 {
			t.Fatalf("curl: %v, %d", err, res.Status)
		}
	}
	// Each cycle is a probe load (seconds in the kernel matrix's emulated
	// guests). The check after them is exact, so a leak that every cycle
	// makes shows; a leak of a rare race between Close and the TLS scans
	// shows less often than in more cycles: the price of the matrix's
	// time.
	const cycles = 8
	for i := range cycles {
		cfg := tlsTestConfig(t, true, uint16(srv.Port))
		wide := i%2 == 1
		if wide {
			cfg.TLS.SystemWide = []string{lib}
		}
		tr, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if tg := waitProbed(t, tr, srv.Proc.Pid()); tg.SystemWide != wide {
			t.Fatalf("cycle %d: system-wide %v, but the server's target is %+v", i, wide, tg)
		}
		if i%3 == 0 || i == cycles-1 {
			curl()
		}
		if err := tr.Close(); err != nil {
			t.Errorf("cycle %d: Close: %v", i, err)
		}
	}
	leftovers(t, base, perf, events)
	curl()
}

// A probed server killed in the middle of a stream: the stream ends, the
// uprobes on the vanished process are detached at the next scan, its
// entry leaves the kernel's map, and nothing errs.
func TestTLSServerKilledMidStream(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	opts := teststack.StackOptions{Events: 500, Interval: 10 * time.Millisecond, TLS: cert, Port: freePort(t)}
	tr, rec := traceTLS(t, true, uint16(opts.Port))
	base, err := bpftest.NewBaseline()
	if err != nil {
		t.Fatal(err)
	}
	perf, events := bpftest.PerfEventFDs(t), bpftest.UprobeEvents()
	srv := teststack.ServeStack(t, teststack.StackStarlette, opts)
	pid := srv.Proc.Pid()
	waitProbed(t, tr, pid)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	curlDone := make(chan error, 1)
	go func() {
		_, err := teststack.CurlWith(ctx, teststack.CurlOptions{CACert: cert.CertFile}, srv.URL+"/v1/chat/completions", tlsBody)
		curlDone <- err
	}()
	streaming := func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, r := range rec.recs {
			if r.Kind == KindProgress && r.Stats.TLS() && r.Stats.Chunks > 0 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !streaming(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no TLS stream started")
		}
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-curlDone; err == nil {
		t.Error("curl finished a stream whose server was killed")
	}
	for deadline := time.Now().Add(5 * time.Second); len(tr.TLSTargets()) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("targets of a dead process: %+v", tr.TLSTargets())
		}
	}
	var v [8]byte
	if err := tr.maps.TwStTlsProcs.Lookup(uint32(pid), &v); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("tw_st_tls_procs still has the dead process: %v", err)
	}
	// The uprobe programs, loaded when the server was first probed, stay
	// with the tracer until Close; nothing attached to the dead process
	// may.
	var objs bpftest.Objects
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if objs, err = base.Ours(); err != nil || objs.Links == 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || objs.Links != 0 || len(objs.Maps) != 0 || len(objs.Programs) != len(tr.TLSPrograms()) {
		t.Errorf("left behind: %v (%v); the tracer holds %d uprobe programs", objs, err, len(tr.TLSPrograms()))
	}
	if n := bpftest.PerfEventFDs(t); n != perf {
		t.Errorf("%d perf event descriptors, %d before", n, perf)
	}
	if now := bpftest.UprobeEvents(); now != events {
		t.Errorf("tracefs uprobe events now %q, before %q", now, events)
	}
	ends := completed(rec.ends(t, 1))
	if len(ends) != 1 || !ends[0].Stats.TLS() || ends[0].Stats.Chunks == 0 ||
		!strings.Contains("reset close client_closed", ends[0].Reason.String()) {
		t.Errorf("the killed stream's ends: %+v", ends)
	}
}
