// Package childproc starts child processes whose parent-death signal
// (SysProcAttr.Pdeathsig) means what its users want: "kill the child when
// this process dies".
//
// The kernel sends the parent-death signal when the thread that forked
// the child ends, not when the process does. The Go runtime ends a thread
// whenever a goroutine locked to it returns, which the programs here do on
// purpose (the receiver's page-layout calibration, the namespace helpers)
// so that no other goroutine inherits the thread's state. A child forked
// on such a thread, by chance of scheduling, is killed in mid-run with no
// output. Start forks every child from one locked thread that lives as long
// as the process, so the signal comes only when the process ends.
package childproc

import (
	"os/exec"
	"runtime"
)

// forkLoopName is the function name of the goroutine that forks every
// child. It starts with the package and never ends, so leak checkers must
// ignore it: the receiver's metadata.yaml spells it out for mdatagen's
// goleak check (tests.goleak.ignore.top), and a test keeps the two equal.
const forkLoopName = "github.com/tokenwire/tokenwire/internal/childproc.forkLoop"

// forks carries Start's requests to the forking thread.
var forks = make(chan func())

func init() {
	// Started with the package, so that it exists before any test takes
	// its snapshot of the goroutines it must not leak.
	go forkLoop()
}

func forkLoop() {
	// Never unlocked, and the goroutine never returns: the thread must
	// outlive every child it forks.
	runtime.LockOSThread()
	for fork := range forks {
		fork()
	}
}

// Start starts cmd, as cmd.Start does, from the process's forking thread.
// That thread is in the network namespace the process started in, so a
// child meant for another namespace must enter it itself (ip netns exec).
func Start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	forks <- func() { errc <- cmd.Start() }
	return <-errc
}
