package kubernetes

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestDaemonSet(t *testing.T) {
	ms := loadManifests(t)
	for _, v := range variants {
		if v.operator {
			continue
		}
		t.Run(v.name, func(t *testing.T) { checkDaemonSetVariant(t, v, v.of(ms)) })
	}
}

func checkDaemonSetVariant(t *testing.T, v variant, ms []manifest) {
	ds := only[*appsv1.DaemonSet](t, ms)
	sa := only[*corev1.ServiceAccount](t, ms)
	cms := map[string]*corev1.ConfigMap{}
	for _, cm := range all[*corev1.ConfigMap](ms) {
		cms[cm.Name] = cm
		if cm.Namespace != ds.Namespace {
			t.Errorf("ConfigMap %s is in namespace %q, the DaemonSet in %q", cm.Name, cm.Namespace, ds.Namespace)
		}
	}
	pod := ds.Spec.Template.Spec

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match the pod template's labels %v", sel, ds.Spec.Template.Labels)
	}
	if ds.Namespace != sa.Namespace {
		t.Errorf("namespaces differ: DaemonSet %q, ServiceAccount %q", ds.Namespace, sa.Namespace)
	}
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if !pod.HostPID {
		t.Error("hostPID is off: tokenwire's process.pid and container.id need the host's /proc")
	}
	if pod.HostIPC {
		t.Error("hostIPC is on: nothing needs it")
	}
	if pod.HostNetwork != v.xdp {
		t.Errorf("hostNetwork %v; want it only with the XDP filter (the node's interfaces)", pod.HostNetwork)
	}
	if pod.HostNetwork && pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork with dnsPolicy %q: the OTLP endpoint's service name would not resolve", pod.DNSPolicy)
	}
	if pod.ShareProcessNamespace != nil && *pod.ShareProcessNamespace {
		t.Error("shareProcessNamespace is on")
	}
	if len(pod.InitContainers) != 0 || len(pod.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers, want 0 and 1", len(pod.InitContainers), len(pod.Containers))
	}
	c := pod.Containers[0]
	checkSecurityContext(t, "DaemonSet", c.SecurityContext, v.wantCaps())
	checkHostPaths(t, "DaemonSet", c.VolumeMounts, pod.Volumes)
	if pod.SecurityContext != nil {
		checkSeccomp(t, "DaemonSet pod", pod.SecurityContext.SeccompProfile, false)
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}

	// Every --config the collector reads is a key of a ConfigMap of the
	// variant, mounted where the argument says.
	texts := configFiles(t, c, pod.Volumes, cms)
	cfg := mergedConfig(t, texts)

	// The readiness probe asks the collector's health_check extension.
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Fatal("no HTTP readiness probe")
	}
	port := c.ReadinessProbe.HTTPGet.Port
	probePort := port.IntValue()
	if port.StrVal != "" {
		probePort = 0
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				probePort = int(p.ContainerPort)
			}
		}
	}
	hc := dig(cfg, "extensions", "health_check", "endpoint")
	if !strings.HasSuffix(fmt.Sprint(hc), fmt.Sprintf(":%d", probePort)) {
		t.Errorf("readiness probe on port %d, health_check listens on %v", probePort, hc)
	}
	checkXDPConfig(t, v, cfg)
	checkEnv(t, "DaemonSet", c.Env, strings.Join(texts, "\n"))
}

// configFiles returns the texts of the collector configs that the
// container's --config arguments name, in order, failing where one is not
// a key of a ConfigMap volume mounted at its directory.
func configFiles(t *testing.T, c corev1.Container, volumes []corev1.Volume, cms map[string]*corev1.ConfigMap) []string {
	t.Helper()
	byName := map[string]corev1.Volume{}
	for _, v := range volumes {
		byName[v.Name] = v
	}
	var texts []string
	for _, arg := range slices.Concat(c.Command, c.Args) {
		path, ok := strings.CutPrefix(arg, "--config=")
		if !ok {
			continue
		}
		dir, key := filepath.Dir(path), filepath.Base(path)
		var text string
		found := false
		for _, m := range c.VolumeMounts {
			v := byName[m.Name]
			if m.MountPath != dir || v.ConfigMap == nil {
				continue
			}
			cm, ok := cms[v.ConfigMap.Name]
			if !ok {
				t.Errorf("--config=%s: ConfigMap %s is not in the variant", path, v.ConfigMap.Name)
				continue
			}
			text, found = cm.Data[key]
			if !found {
				t.Errorf("--config=%s: ConfigMap %s has no key %s", path, cm.Name, key)
			}
		}
		if !found {
			t.Errorf("--config=%s: no ConfigMap volume with that key is mounted at %s", path, dir)
			continue
		}
		texts = append(texts, text)
	}
	if len(texts) == 0 {
		t.Fatal("the container reads no --config from a ConfigMap")
	}
	return texts
}

// mergedConfig parses collector configs and merges them in order as the
// collector does with several --config flags: maps merge key by key,
// anything else is replaced.
func mergedConfig(t *testing.T, texts []string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, text := range texts {
		out = mergeMaps(out, collectorConfig(t, text))
	}
	return out
}

func mergeMaps(dst, src map[string]any) map[string]any {
	for k, sv := range src {
		if sm, ok := sv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeMaps(dm, sm)
				continue
			}
		}
		dst[k] = sv
	}
	return dst
}

// checkXDPConfig checks that the XDP filter is on (xdp.interfaces set)
// exactly in the variants that grant NET_ADMIN.
func checkXDPConfig(t *testing.T, v variant, cfg map[string]any) {
	t.Helper()
	ifaces, _ := dig(cfg, "receivers", "tokenwire", "xdp", "interfaces").([]any)
	if on := len(ifaces) > 0; on != v.xdp {
		t.Errorf("XDP filter on: %v (xdp.interfaces %v); the variant grants NET_ADMIN: %v", on, ifaces, v.xdp)
	}
}

// checkEnv checks that every ${env:X} of the collector config is set.
func checkEnv(t *testing.T, what string, env []corev1.EnvVar, config string) {
	t.Helper()
	set := map[string]bool{}
	for _, e := range env {
		set[e.Name] = true
	}
	for _, name := range envRefs(config) {
		if !set[name] {
			t.Errorf("%s: the collector config reads ${env:%s}, which the pod does not set", what, name)
		}
	}
	// k8s_attributes' node filter reads its variable by name, not ${env:}.
	if !set["K8S_NODE_NAME"] {
		t.Errorf("%s: K8S_NODE_NAME (k8s_attributes filter.node_from_env_var) is not set", what)
	}
}

// envRefs returns the X of every ${env:X} in s.
func envRefs(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "${env:")
		if i < 0 {
			return out
		}
		s = s[i+len("${env:"):]
		j := strings.IndexAny(s, "}:")
		if j < 0 {
			return out
		}
		out = append(out, s[:j])
	}
}
