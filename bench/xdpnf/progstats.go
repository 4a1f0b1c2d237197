package main

import (
	"encoding/json"

	"github.com/cilium/ebpf"
)

// progStats are an XDP program's cumulative runs and run time, as the
// kernel counts them while kernel.bpf_stats_enabled is on.
type progStats struct{ runs, ns uint64 }

// xdpProgStats reads the stats of the XDP program attached to twb-r (zero
// when there is none, or with -bpf-stats off). The program is found by
// the id the link reports, so it works for every XDP variant alike.
func xdpProgStats() progStats {
	out, err := sh("ip", "-n", nsRcv, "-j", "-d", "link", "show", "dev", ifRcv)
	if err != nil {
		return progStats{}
	}
	var v []struct {
		XDP struct {
			Prog struct {
				ID uint32 `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	if json.Unmarshal([]byte(out), &v) != nil || len(v) != 1 || v[0].XDP.Prog.ID == 0 {
		return progStats{}
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(v[0].XDP.Prog.ID))
	if err != nil {
		return progStats{}
	}
	defer prog.Close()
	st, err := prog.Stats()
	if err != nil {
		return progStats{}
	}
	return progStats{runs: st.RunCount, ns: uint64(st.Runtime.Nanoseconds())}
}
