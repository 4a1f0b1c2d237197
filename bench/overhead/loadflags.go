package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// loadArgs are what both load subcommands take: the server, how many
// clients, the stream's length and event interval (for the start
// stagger), the measured windows the orchestrator gives as absolute times
// (the stats window [statsFrom, from), empty when they are equal, then
// the window [from, to)), and where the JSON result goes.
type loadArgs struct {
	addr                string
	streams, chunks     int
	interval            time.Duration
	statsFrom, from, to time.Time
	out                 string
}

// parseLoad parses a load subcommand's flags over the defaults def,
// raises the open-file limit to nofile and checks the window: it starts
// in the future and ends after it, within an hour.
func parseLoad(name string, args []string, def loadArgs, nofile uint64) (loadArgs, error) {
	a := def
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.StringVar(&a.addr, "addr", def.addr, "server address")
	fs.IntVar(&a.streams, "streams", def.streams, "concurrent clients")
	fs.IntVar(&a.chunks, "chunks", def.chunks, "events per stream")
	fs.DurationVar(&a.interval, "interval", def.interval, "the server's event interval (for the start stagger)")
	statsFromN := fs.Int64("stats-from", 0, "start of the stats window, which ends at -from, Unix ns (0: none)")
	fromN := fs.Int64("from", 0, "start of the measured window, Unix ns")
	toN := fs.Int64("to", 0, "end of the measured window, Unix ns")
	fs.StringVar(&a.out, "out", "", "write the JSON result here")
	fs.Parse(args)
	if err := benchutil.RaiseNofile(nofile); err != nil {
		return a, err
	}
	a.from, a.to = time.Unix(0, *fromN), time.Unix(0, *toN)
	a.statsFrom = a.from
	if *statsFromN != 0 {
		a.statsFrom = time.Unix(0, *statsFromN)
	}
	if !a.statsFrom.After(time.Now()) || a.from.Before(a.statsFrom) || !a.to.After(a.from) || time.Until(a.to) > time.Hour {
		return a, fmt.Errorf("windows [%v, %v) and [%v, %v) must start in the future, follow each other, and end within an hour", a.statsFrom, a.from, a.from, a.to)
	}
	return a, nil
}
