package teststack

import (
	"fmt"
	"strings"
)

// CollectorTelemetry is the collector's service.telemetry section for a
// test or benchmark that reads the collector's logs and self-metrics: no
// log sampling (a check counts lines), and self-metrics pulled from
// 127.0.0.1:port with the bare names the checks query. level is the
// self-metrics' level ("" for the collector's default). Each line carries
// indent in front, for the place under service: the caller puts it.
func CollectorTelemetry(port int, level, indent string) string {
	levelLine := ""
	if level != "" {
		levelLine = "\n    level: " + level
	}
	s := fmt.Sprintf(`telemetry:
  logs:
    sampling:
      enabled: false
  metrics:%s
    readers:
      - pull:
          exporter:
            prometheus:
              host: 127.0.0.1
              port: %d
              without_scope_info: true
              without_units: true
              without_type_suffix: true
`, levelLine, port)
	return indent + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+indent) + "\n"
}
