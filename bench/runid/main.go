// Command runid prints a new run id for make bench: UTC time, commit and
// "-dirty" when the tree has changes outside the benchmark's output.
package main

import (
	"fmt"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

func main() { fmt.Println(benchutil.NewRunID()) }
