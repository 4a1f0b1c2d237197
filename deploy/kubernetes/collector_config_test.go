package kubernetes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestCollectorConfigs checks the collector configuration of every
// variant: pods are associated by container.id, and the built collector
// validates it (with two --config files where the variant has two).
func TestCollectorConfigs(t *testing.T) {
	ms := loadManifests(t)
	configs := map[string][]string{} // variant -> config texts, in --config order
	for _, v := range variants {
		vms := v.of(ms)
		if v.operator {
			oc := only[*otelCollector](t, vms)
			text, err := yaml.Marshal(oc.Spec.Config)
			if err != nil {
				t.Fatal(err)
			}
			configs[v.name] = []string{string(text)}
			continue
		}
		ds := only[*appsv1.DaemonSet](t, vms)
		cms := map[string]*corev1.ConfigMap{}
		for _, cm := range all[*corev1.ConfigMap](vms) {
			cms[cm.Name] = cm
		}
		configs[v.name] = configFiles(t, ds.Spec.Template.Spec.Containers[0], ds.Spec.Template.Spec.Volumes, cms)
	}
	for name, texts := range configs {
		cfg := mergedConfig(t, texts)
		assoc := fmt.Sprint(dig(cfg, "processors", "k8s_attributes", "pod_association"))
		if !strings.Contains(assoc, "name:container.id") || !strings.Contains(assoc, "from:resource_attribute") {
			t.Errorf("%s: k8s_attributes pod_association %s, want container.id from the resource", name, assoc)
		}
		for _, p := range []string{"metrics", "traces"} {
			procs := fmt.Sprint(dig(cfg, "service", "pipelines", p, "processors"))
			if !strings.Contains(procs, "k8s_attributes") {
				t.Errorf("%s: %s pipeline processors %s lack k8s_attributes", name, p, procs)
			}
		}
	}

	bin := os.Getenv("TOKENWIRE_COLLECTOR")
	if bin == "" {
		bin = filepath.Join("..", "..", "_build", "tokenwire")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("TOKENWIRE_REQUIRE_COLLECTOR") == "1" {
			t.Fatalf("collector binary: %v (make build)", err)
		}
		t.Skipf("collector binary %s not built (make build); skipping `validate`", bin)
	}
	dir := t.TempDir()
	for name, texts := range configs {
		args := []string{"validate"}
		for i, text := range texts {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", strings.NewReplacer(" ", "", ",", "-").Replace(name), i))
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		cmd := exec.Command(bin, args...)
		// What the pod's environment would hold.
		cmd.Env = append(os.Environ(), "POD_IP=192.0.2.7", "K8S_NODE_NAME=node-1",
			"OTLP_TRACES_ENDPOINT=tempo.observability.svc.cluster.local:4317")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s %s: %v\n%s", name, bin, strings.Join(args, " "), err, out)
		}
	}
}

// collectorConfig parses a collector configuration.
func collectorConfig(t *testing.T, text string) map[string]any {
	t.Helper()
	if text == "" {
		t.Fatal("empty collector config")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("collector config: %v", err)
	}
	return cfg
}

// dig follows keys through nested maps, returning nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
