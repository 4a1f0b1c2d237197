package tokenwirereceiver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// StreamsClientsConfig selects the outbound calls measured as clients:
// connections processes on this host open to an LLM API's port (an agent
// calling an OpenAI-compatible or Anthropic API), reported with the GenAI
// client metrics and a CLIENT span per call.
//
// Off unless RemotePorts lists a port: a host makes many outbound
// connections (package mirrors, databases, other services), and only the
// user knows which of them are LLM calls; the kernel tracks only the
// sockets whose remote port is listed, so every other connection costs a
// port test and nothing more.
type StreamsClientsConfig struct {
	// Enabled turns client measurement off while keeping the lists; on by
	// default, it measures nothing until RemotePorts lists a port.
	Enabled bool `mapstructure:"enabled"`
	// RemotePorts are the servers' ports whose calls are measured (at most
	// 16: the kernel reads them without a map lookup).
	RemotePorts []int `mapstructure:"remote_ports"`
	// Hosts, when set, keeps only the calls whose Host header (without its
	// port) is one of these, or for a TLS call whose request is not read,
	// the server name its connection's ClientHello asked for (SNI);
	// applied in the receiver, after the kernel.
	Hosts []string `mapstructure:"hosts"`
	// ProcessNames and Pids, when set, select the calling processes in the
	// kernel (at most 8 names and 16 pids): a name as /proc/PID/comm shows
	// it (the executable's name, cut to 15 bytes). Neither: any process.
	ProcessNames []string `mapstructure:"process_names"`
	Pids         []int    `mapstructure:"pids"`
}

// active says whether any call is to be measured.
func (c *StreamsClientsConfig) active() bool { return c.Enabled && len(c.RemotePorts) > 0 }

func (c *StreamsClientsConfig) validate() []error {
	var errs []error
	const key = "streams.clients"
	if c.RemotePorts != nil {
		errs = append(errs, validatePorts(key+".remote_ports", c.RemotePorts)...)
	}
	if len(c.RemotePorts) > stream.MaxClientPorts {
		errs = append(errs, fmt.Errorf("%s.remote_ports: at most %d ports, got %d", key, stream.MaxClientPorts, len(c.RemotePorts)))
	}
	if len(c.ProcessNames) > stream.MaxClientNames {
		errs = append(errs, fmt.Errorf("%s.process_names: at most %d names, got %d", key, stream.MaxClientNames, len(c.ProcessNames)))
	}
	for i, n := range c.ProcessNames {
		if n == "" || filepath.Base(n) != n {
			errs = append(errs, fmt.Errorf("%s.process_names[%d]: %q is not a process name (no '/', not empty)", key, i, n))
		}
	}
	if len(c.Pids) > stream.MaxClientPids {
		errs = append(errs, fmt.Errorf("%s.pids: at most %d pids, got %d", key, stream.MaxClientPids, len(c.Pids)))
	}
	for i, p := range c.Pids {
		if p < 1 || p > 1<<22 {
			errs = append(errs, fmt.Errorf("%s.pids[%d]: %d is not a process id", key, i, p))
		}
	}
	for i, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/ ") || strings.Count(h, ":") == 1 { // a port, a scheme or a path
			errs = append(errs, fmt.Errorf("%s.hosts[%d]: %q is not a host name or address (no port, no scheme)", key, i, h))
		}
	}
	if (c.Hosts != nil || c.ProcessNames != nil || c.Pids != nil) && c.Enabled && len(c.RemotePorts) == 0 {
		errs = append(errs, fmt.Errorf("%s: hosts, process_names or pids select among the calls to remote_ports: list at least one remote port", key))
	}
	return errs
}

// probe is what the stream probe needs of the clients config.
func (c *StreamsClientsConfig) probe() stream.ClientConfig {
	if !c.active() {
		return stream.ClientConfig{}
	}
	out := stream.ClientConfig{Names: c.ProcessNames}
	for _, p := range c.RemotePorts {
		out.RemotePorts = append(out.RemotePorts, uint16(p))
	}
	for _, p := range c.Pids {
		out.Pids = append(out.Pids, uint32(p))
	}
	return out
}

// hosts is what the aggregator keeps of the calls' Host headers: IPv6
// addresses as the Host header has them, without brackets.
func (c *StreamsClientsConfig) hosts() []string {
	out := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		out[i] = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return out
}

// selects returns whether a process (pid, executable name) is one whose
// calls streams.clients measures, as the kernel selects them: by its
// comm (/proc/PID/comm, which the kernel compares: python3, where the
// executable is python3.11), or its executable's name cut as comm is.
func (c *StreamsClientsConfig) selects() func(pid uint32, exe string) bool {
	if !c.active() {
		return func(uint32, string) bool { return false }
	}
	pids := map[uint32]bool{}
	for _, p := range c.Pids {
		pids[uint32(p)] = true
	}
	names := map[string]bool{}
	for _, n := range c.ProcessNames {
		names[cutComm(n)] = true
	}
	return func(pid uint32, exe string) bool {
		if len(pids)+len(names) == 0 || pids[pid] || names[cutComm(exe)] {
			return true
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && names[strings.TrimSuffix(string(comm), "\n")]
	}
}

// cutComm cuts a name as the kernel's comm keeps it.
func cutComm(name string) string {
	if len(name) > stream.MaxCommLen {
		return name[:stream.MaxCommLen]
	}
	return name
}

// candidates returns which processes the TLS scan probes before their
// first call (sel: selects' answer): the ones process_names or pids
// select; none when neither is set (every process would be).
func (c *StreamsClientsConfig) candidates(sel func(pid uint32, exe string) bool) func(pid uint32) bool {
	if !c.active() || len(c.Pids)+len(c.ProcessNames) == 0 {
		return nil
	}
	return func(pid uint32) bool { return sel(pid, "") }
}
