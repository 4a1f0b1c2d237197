package benchutil

import (
	"flag"
	"fmt"
	"os"
)

// Main is a bench command's main. When os.Args[1] names one of subs (the
// command re-executed as a child of itself: a server, a load, a sender in
// a namespace), it runs that with the remaining arguments; otherwise it
// parses the flags and runs run. An error goes to stderr after the name
// of what failed, and the process exits 1.
func Main(name string, run func() error, subs map[string]func(args []string) error) {
	if len(os.Args) > 1 {
		if sub, ok := subs[os.Args[1]]; ok {
			exitOn(os.Args[1], sub(os.Args[2:]))
			return
		}
	}
	flag.Parse()
	exitOn(name, run())
}

func exitOn(name string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
