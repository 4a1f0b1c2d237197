package stream

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// Point is a kernel event the stream probe needs, with a program per hook
// type. The tracepoints exist from Linux 6.4; fentry/fexit and kprobes
// attach to the kernel function that fires the tracepoint for TCP, which
// every kernel from 5.10 has (checked in the BTF of Debian's 5.10, 6.1 and
// 6.12 and of this project's 6.18 build machines, and run by make kernels).
type Point struct {
	// Name is the tracepoint's, as the startup log and self-telemetry
	// show it.
	Name string
	// Function is the kernel function the fentry/fexit and kprobe
	// variants attach to.
	Function string
	// Optional points may fail to attach: streams then run without what
	// they give (request details).
	Optional bool
	Variants []probe.Variant
}

// Hook point names.
const (
	PointRecv  = "sock_recv_length"
	PointSent  = "sock_send_length"
	PointReady = "sk_data_ready"
	PointState = "inet_sock_set_state"
)

// TracepointGroup is the tracepoint group of every stream hook point.
const TracepointGroup = "sock"

// HookPoints lists the stream probe's hook points in the order Open
// attaches them: reads and writes first, so that when request arrival
// starts making streams, their first writes are seen; state changes last.
func HookPoints() []Point { return hookPoints(recvmsgArgs()) }

func hookPoints(recvArgs int, recvErr error) []Point {
	// One fexit program per tcp_recvmsg prototype: its return value comes
	// after all of its arguments.
	recvFexit := probe.One(hook.Fentry, fmt.Sprintf("tw_st_recv_fx%d", recvArgs), probe.Tracing())
	recvFexit.Check = func() error {
		if recvErr != nil {
			return recvErr
		}
		if recvArgs < 4 || recvArgs > 6 {
			return fmt.Errorf("tcp_recvmsg takes %d arguments here; the probe knows 4, 5 or 6", recvArgs)
		}
		return nil
	}
	return []Point{
		{Name: PointRecv, Function: "tcp_recvmsg", Optional: true, Variants: append(
			[]probe.Variant{recvFexit, withReturn("recv", "tcp_recvmsg")}, tracepoints("recv", PointRecv)...)},
		{Name: PointSent, Function: "tcp_sendmsg_locked", Variants: append([]probe.Variant{
			probe.One(hook.Fentry, "tw_st_sent_fx", probe.Tracing()),
			withReturn("sent", "tcp_sendmsg_locked")}, tracepoints("sent", PointSent)...)},
		{Name: PointReady, Function: "sock_def_readable", Variants: append([]probe.Variant{
			probe.One(hook.Fentry, "tw_st_ready_fe", probe.Tracing()),
			probe.One(hook.Kprobe, "tw_st_ready_kp", probe.Kprobe("sock_def_readable"))}, tracepoints("ready", PointReady)...)},
		{Name: PointState, Function: "tcp_set_state", Variants: append([]probe.Variant{
			probe.One(hook.Fentry, "tw_st_state_fe", probe.Tracing()),
			probe.One(hook.Kprobe, "tw_st_state_kp", probe.Kprobe("tcp_set_state"))}, tracepoints("state", PointState)...)},
	}
}

// tracepoints are the three tracepoint variants of an event: programs
// tw_st_<event>_btf, _raw and _tp on the tracepoint sock:name.
func tracepoints(event, name string) []probe.Variant {
	return probe.Tracepoints("tw_st_"+event, TracepointGroup, name)
}

// withReturn is the kprobe variant of an event that needs a function's
// return value: tw_st_<event>_krp on its return, attached first, and
// tw_st_<event>_kp on its entry, which remembers the socket for it.
func withReturn(event, fn string) probe.Variant {
	return probe.Variant{Kind: hook.Kprobe, Parts: []probe.Part{
		{Program: "tw_st_" + event + "_krp", Attach: probe.Kretprobe(fn)},
		{Program: "tw_st_" + event + "_kp", Attach: probe.Kprobe(fn)},
	}}
}

// recvmsgArgs returns how many arguments the running kernel's tcp_recvmsg
// takes, from its BTF: 6 before Linux 5.19 (with nonblock), 5 until 6.17
// (with addr_len), 4 since.
func recvmsgArgs() (int, error) {
	fn, err := probe.KernelType[*btf.Func]("tcp_recvmsg")
	if err != nil {
		return 0, err
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return 0, errors.New("tcp_recvmsg in kernel BTF has no prototype")
	}
	return len(proto.Params), nil
}

// regsFromBTF reports whether the kernel has bpf_task_pt_regs (Linux
// 5.15+), the direct way to a task's syscall registers; without it the
// programs find them at the top of the task's kernel stack.
var regsFromBTF = sync.OnceValue(func() bool {
	return features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskPtRegs) == nil
})

// RegsByCast reports whether the programs can also reach the syscall
// registers without a helper call: the kernel has bpf_rdonly_cast (Linux
// 6.2+), a kfunc the verifier turns into a register move. It is the
// programs' regs_by_cast; bench/kcost sets its parts' with it.
var RegsByCast = sync.OnceValue(func() bool {
	return regsFromBTF() && probe.HaveKfunc("bpf_rdonly_cast")
})
