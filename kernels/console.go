package main

import (
	"strconv"
	"strings"
	"time"
)

// Line is one line of a session's output and when it arrived, counted from
// the start of the guest (or of the native run).
type Line struct {
	At   time.Duration
	Text string
}

// Session is what one execution of the plan printed (one guest boot or the
// native run), split along the protocol of PlanScript.
type Session struct {
	Booted bool
	BootAt time.Duration // when /init reported (guests)
	Uname  string
	Runs   map[string]*RunOutput
	Done   bool
	DoneAt time.Duration
	Dmesg  []string
	// Other holds the lines outside the protocol: firmware, kernel
	// messages that reached the console, a panic. Kept for diagnosis.
	Other []string
}

// RunOutput is one test binary's part of a session.
type RunOutput struct {
	Begun, Ended bool
	Begin, End   time.Duration
	RC           int
	Lines        []string
}

// Duration is how long the run took as seen by the host (0 if it did not
// end).
func (r *RunOutput) Duration() time.Duration {
	if !r.Begun || !r.Ended {
		return 0
	}
	return r.End - r.Begin
}

// ParseSession splits lines along the protocol. A marker may follow other
// text on the same console line (terminal escapes from the firmware), so
// each line is read from its marker on.
func ParseSession(lines []Line) *Session {
	s := &Session{Runs: map[string]*RunOutput{}}
	run := func(id string) *RunOutput {
		r := s.Runs[id]
		if r == nil {
			r = &RunOutput{RC: -1}
			s.Runs[id] = r
		}
		return r
	}
	for _, l := range lines {
		text := strings.TrimRight(l.Text, "\r\n")
		i := strings.Index(text, marker+" ")
		if i < 0 {
			s.Other = append(s.Other, text)
			continue
		}
		verb, arg, _ := strings.Cut(text[i+len(marker)+1:], " ")
		switch verb {
		case "boot":
			s.Booted, s.BootAt = true, l.At
		case "kernel":
			s.Uname = strings.TrimSpace(arg)
		case "begin":
			r := run(strings.TrimSpace(arg))
			r.Begun, r.Begin = true, l.At
		case "out":
			id, out, _ := strings.Cut(arg, " ")
			r := run(id)
			r.Lines = append(r.Lines, out)
		case "end":
			id, rc, _ := strings.Cut(arg, " ")
			r := run(id)
			r.Ended, r.End = true, l.At
			if n, err := strconv.Atoi(strings.TrimPrefix(rc, "rc=")); err == nil {
				r.RC = n
			}
		case "done":
			s.Done, s.DoneAt = true, l.At
		case "dmesg":
			s.Dmesg = append(s.Dmesg, arg)
		default:
			s.Other = append(s.Other, text)
		}
	}
	return s
}
