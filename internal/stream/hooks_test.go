package stream

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestEveryHookType puts each hook type first in turn and measures one
// stream: where the kernel has a hook point's target, a type it is
// expected to accept (bpftest.ExpectedHooks) must attach there, and every
// combination must measure the stream exactly, request details included.
// Each also runs, where this kernel has the faster way, the way older
// kernels or other hook types need: syscall registers from
// bpf_task_pt_regs where loads alone reach them (5.15 to 6.1), write
// tails from the writer's memory where the kernel's copy is read (before
// 6.2), registers from the kernel stack where bpf_task_pt_regs exists
// (5.10), and per-connection state in the map where socket storage works.
func TestEveryHookType(t *testing.T) {
	bpftest.RequireTracefs(t)
	expected := bpftest.ExpectedHooks(t)
	type variant struct{ regsByHelper, tailByUser, stackRegs, stateInMap, noSlots bool }
	for _, k := range hook.DefaultOrder {
		variants := []variant{{}}
		if RegsByCast() {
			variants = append(variants, variant{regsByHelper: true})
		}
		if _, err := DirectMapBase(); err == nil {
			variants = append(variants, variant{tailByUser: true})
		}
		if regsFromBTF() {
			variants = append(variants, variant{stackRegs: true})
		}
		if len(typedPrefix([]hook.Kind{k})) > 0 {
			variants = append(variants, variant{stateInMap: true})
			if probe.HaveAtomics() {
				variants = append(variants, variant{noSlots: true})
			}
		}
		for _, v := range variants {
			stackRegs := v.stackRegs
			name := fmt.Sprintf("%s/stackRegs=%v/stateInMap=%v", k, v.stackRegs, v.stateInMap)
			if v.regsByHelper {
				name = fmt.Sprintf("%s/regsByHelper", k)
			}
			if v.tailByUser {
				name = fmt.Sprintf("%s/tailByUser", k)
			}
			if v.noSlots {
				name = fmt.Sprintf("%s/noSlots", k)
			}
			t.Run(name, func(t *testing.T) {
				srv := &teststack.SSEServer{Think: 5 * time.Millisecond, Interval: 5 * time.Millisecond, Events: 5, HeadersFirst: true}
				addr, port := serve(t, srv)
				cfg := testConfig(port)
				cfg.HookOrder = append([]hook.Kind{k}, hook.DefaultOrder...)
				cfg.stackRegs = stackRegs
				cfg.regsByHelper = v.regsByHelper
				cfg.tailByUser = v.tailByUser
				cfg.stateInMap = v.stateInMap
				if v.noSlots {
					cfg.StateSlots = 0
				}
				tr, err := Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("state in %s", tr.StateStorage())
				for _, p := range tr.HookPoints() {
					bpftest.LogHookMatrix(t, "stream", p.Name, k, p.Choice)
					target := bpftest.Target{Group: TracepointGroup, Tracepoint: p.Name, Function: pointFunction(p.Name)}
					if p.Choice.Kind != k && slices.Contains(expected, k) && bpftest.KernelHas(t, k, target) {
						t.Errorf("%s: %s must attach on this kernel: %s", p.Name, k, p.Choice.Summary())
					}
				}
				rec := record(t, tr)
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"model":"m1","stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				streams := rec.ends(t, 1)
				ends := requireCompleted(t, streams, 1)
				e := ends[0]
				var http bool
				var request []byte
				for _, r := range streams[e.ID] {
					http = http || (r.Kind == KindResponse && r.Flags&RespHTTP != 0)
					if r.Kind == KindRequest {
						request = append(request, r.Data...)
					}
				}
				if !http || e.Stats.Chunks != 5 || e.Reason != EndTerminator {
					t.Errorf("http mode %v, %d chunks, end %v; want http, 5 chunks, terminator", http, e.Stats.Chunks, e.Reason)
				}
				if !bytes.HasPrefix(request, []byte("POST /v1/chat/completions HTTP/1.1\r\n")) ||
					!bytes.Contains(request, []byte(`"model":"m1"`)) {
					t.Errorf("request captured as %q; want the whole POST with its body", request)
				}
			})
		}
	}
}

// pointFunction returns the kernel function behind a hook point.
func pointFunction(name string) string {
	for _, p := range HookPoints() {
		if p.Name == name {
			return p.Function
		}
	}
	return ""
}

// TestHooksInUse logs what attached at each hook point with the tests'
// hook order, for the kernel matrix (see bpftest.HookOrderEnv), and checks
// that the programs as the kernel runs them have the read-only settings
// inlined (probe.InlineReadOnly): no program reads .rodata before its
// first helper call (where BTF-typed hooks test the port), and the
// watched port is an immediate. Where the kernel reports it, each program
// took the verifier at most half its limit of instructions to verify.
func TestHooksInUse(t *testing.T) {
	bpftest.Require(t)
	const port = 40321 // nothing listens: a constant to find
	tr, err := Open(testConfig(port))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	t.Logf("state in %s", tr.StateStorage())
	// Where the per-connection state lives depends on the hook types that
	// attached (socket storage for BTF-typed ones, from 5.11): the matrix
	// shows it as a row of its hook table.
	storage := "map"
	switch {
	case tr.inSlots:
		storage = "slots"
	case strings.HasPrefix(tr.StateStorage(), "socket storage"):
		storage = "socket_storage"
	}
	t.Logf("HOOKS capability=stream point=state_storage kind=%s", storage)
	for _, p := range tr.HookPoints() {
		bpftest.LogHooks(t, "stream", p.Name, p.Choice)
		if p.Choice.Closer == nil && !p.Optional {
			t.Errorf("%s: nothing attached", p.Name)
		}
	}
	var withPort []string
	for point, progs := range tr.Programs() {
		for _, prog := range progs {
			info, err := prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			checkVerifierHeadroom(t, point, info)
			insns, err := info.Instructions()
			if err != nil {
				t.Fatalf("%s: %v", info.Name, err)
			}
			// Registers that hold an address in .rodata, up to the first
			// helper call (straight-line: a load through one is a read the
			// pass should have made an immediate; an address no load uses
			// may stay).
			rodata := map[asm.Register]bool{}
			called := false
			for i, ins := range insns {
				called = called || ins.IsBuiltinCall()
				if ins.Constant == port && (ins.IsConstantLoad(asm.DWord) || ins.OpCode.Class().IsJump()) {
					withPort = append(withPort, info.Name)
				}
				if called {
					continue
				}
				if ins.OpCode.Class().IsLoad() && ins.OpCode.Mode() == asm.MemMode && rodata[ins.Src] {
					t.Errorf("%s (%s) reads .rodata at instruction %d, before its first helper call: %v", info.Name, point, i, ins)
				}
				if ins.OpCode.Class().IsJump() || ins.OpCode.Class() == asm.StXClass || ins.OpCode.Class() == asm.StClass {
					continue // no register written
				}
				if ins.OpCode.Class() == asm.ALU64Class && ins.OpCode.ALUOp() == asm.Add && ins.OpCode.Source() == asm.ImmSource {
					continue // an address stays one at a constant offset
				}
				rodata[ins.Dst] = ins.IsLoadFromMap() && ins.Src == asm.PseudoMapValue && mapName(t, uint32(ins.Constant)) == ".rodata"
			}
		}
	}
	if len(withPort) == 0 {
		t.Errorf("no program has the watched port %d as an immediate", port)
	}
	t.Logf("programs with the port inlined: %v", withPort)
}

// maxVerifiedInsns is the most instructions the verifier may walk to load
// one of the stream programs: half of its 1M limit.
const maxVerifiedInsns = 500_000

// checkVerifierHeadroom logs how many instructions the verifier walked to
// load a program (VERIFIED lines in the test's log) and fails the test
// when that is over maxVerifiedInsns. The verifier gives up at 1M, and how
// many it walks differs between kernels with their pruning: a program
// that takes half of that on one kernel can fail to load on another, or
// after a small change. Kernels before 5.16 do not report the count, so
// the matrix's 5.10 is not checked here (every test there checks that the
// programs load at all): it is logged as missing.
func checkVerifierHeadroom(t *testing.T, where string, info *ebpf.ProgramInfo) {
	t.Helper()
	n, ok := info.VerifiedInstructions()
	if !ok {
		t.Logf("%s (%s): this kernel does not report how many instructions it verified (Linux 5.16+)", info.Name, where)
		return
	}
	t.Logf("VERIFIED program=%s point=%s insns=%d", info.Name, where, n)
	if n > maxVerifiedInsns {
		t.Errorf("%s (%s): the verifier walked %d instructions, over %d (half its limit)", info.Name, where, n, maxVerifiedInsns)
	}
}

// mapName returns the name of the map with the given ID.
func mapName(t *testing.T, id uint32) string {
	t.Helper()
	m, err := ebpf.NewMapFromID(ebpf.MapID(id))
	if err != nil {
		t.Fatalf("map %d: %v", id, err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatalf("map %d: %v", id, err)
	}
	return info.Name
}
