package teststack

import (
	"errors"
	"slices"
	"sync"
)

// Group is a set of live children that are stopped together, newest
// first (a load generator before its server, a server before the
// collector observing it), for programs that have no test cleanup: a
// failure, a signal or a normal return calls StopAll.
type Group struct {
	mu      sync.Mutex
	live    []*Proc
	closing bool
}

// Start starts a child as StartProc does and keeps it in the group until
// it is stopped. After StopAll it refuses.
func (g *Group) Start(opts ProcOptions, bin string, args ...string) (*Proc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return nil, errors.New("shutting down")
	}
	p, err := StartProc(opts, bin, args...)
	if err != nil {
		return nil, err
	}
	p.onStop = g.forget
	g.live = append(g.live, p)
	return p, nil
}

// Adopt keeps a child started elsewhere (StartStack's server) in the
// group, so that StopAll stops it too; after StopAll it stops it at once.
func (g *Group) Adopt(p *Proc) {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		p.Stop()
		return
	}
	p.onStop = g.forget
	g.live = append(g.live, p)
	g.mu.Unlock()
}

func (g *Group) forget(p *Proc) {
	g.mu.Lock()
	g.live = slices.DeleteFunc(g.live, func(x *Proc) bool { return x == p })
	g.mu.Unlock()
}

// StopAll stops every live child, newest first, and refuses new ones.
func (g *Group) StopAll() {
	g.mu.Lock()
	g.closing = true
	live := slices.Clone(g.live)
	g.mu.Unlock()
	for i := len(live) - 1; i >= 0; i-- {
		live[i].Stop()
	}
}
