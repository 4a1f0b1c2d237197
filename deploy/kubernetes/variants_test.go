package kubernetes

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// variant is one way of deploying tokenwire: the files a user applies
// together (README.md), and what they must add up to.
type variant struct {
	name     string
	files    []string // relative to this directory
	operator bool     // an OpenTelemetryCollector instead of ConfigMap + DaemonSet
	xdp      bool     // the XDP filter on: NET_ADMIN and the host network
}

var variants = []variant{
	{name: "plain", files: []string{"namespace.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml"}},
	{name: "plain, XDP", xdp: true, files: []string{"namespace.yaml", "rbac.yaml", "configmap.yaml",
		"xdp/configmap.yaml", "xdp/daemonset.yaml"}},
	{name: "operator", operator: true, files: []string{"namespace.yaml", "rbac.yaml",
		"operator/opentelemetrycollector.yaml"}},
	{name: "operator, XDP", operator: true, xdp: true, files: []string{"namespace.yaml", "rbac.yaml",
		"operator/xdp/opentelemetrycollector.yaml"}},
}

// variantNamed returns the variant called name.
func variantNamed(t *testing.T, name string) variant {
	t.Helper()
	for _, v := range variants {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %q", name)
	return variant{}
}

// wantCaps are the capabilities a variant adds (after dropping ALL): BPF
// for maps and programs, PERFMON for tracing programs and
// perf_event_open, and NET_ADMIN only where the XDP filter is on.
func (v variant) wantCaps() []string {
	if v.xdp {
		return []string{"BPF", "NET_ADMIN", "PERFMON", "SYS_PTRACE"}
	}
	return []string{"BPF", "PERFMON", "SYS_PTRACE"}
}

// of returns the manifests of the variant's files.
func (v variant) of(ms []manifest) []manifest {
	var out []manifest
	for _, m := range ms {
		if slices.Contains(v.files, filepath.ToSlash(m.file)) {
			out = append(out, m)
		}
	}
	return out
}

// all returns every object of type T.
func all[T any](ms []manifest) []T {
	var found []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			found = append(found, o)
		}
	}
	return found
}

// only returns the single object of type T, failing unless there is
// exactly one.
func only[T any](t *testing.T, ms []manifest) T {
	t.Helper()
	found := all[T](ms)
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// TestXDPVariantsDifferOnlyAsDocumented checks that each XDP variant is its
// base with exactly the documented changes (the header comments of
// xdp/daemonset.yaml and operator/xdp/opentelemetrycollector.yaml), so the
// copies cannot drift from the base and no privilege slips in unnoticed.
func TestXDPVariantsDifferOnlyAsDocumented(t *testing.T) {
	ms := loadManifests(t)
	t.Run("DaemonSet", func(t *testing.T) {
		base := only[*appsv1.DaemonSet](t, variantNamed(t, "plain").of(ms))
		got := only[*appsv1.DaemonSet](t, variantNamed(t, "plain, XDP").of(ms))
		want := base.DeepCopy()
		pod := &want.Spec.Template.Spec
		pod.HostNetwork = true
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "xdp-config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tokenwire-xdp-config"}}}})
		c := &pod.Containers[0]
		c.Args = append(c.Args, "--config=/etc/tokenwire-xdp/xdp.yaml")
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "xdp-config", MountPath: "/etc/tokenwire-xdp", ReadOnly: true})
		c.SecurityContext.Capabilities.Add = append(c.SecurityContext.Capabilities.Add, "NET_ADMIN")
		for _, p := range []*corev1.PodSpec{pod, &got.Spec.Template.Spec} {
			slices.SortFunc(p.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
			slices.SortFunc(p.Containers[0].VolumeMounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
			slices.Sort(p.Containers[0].SecurityContext.Capabilities.Add)
		}
		if !apiequality.Semantic.DeepEqual(want, got) {
			t.Errorf("xdp/daemonset.yaml differs from daemonset.yaml beyond the documented changes:\n%s", jsonDiff(t, want, got))
		}

		// The filter's own ConfigMap holds nothing but receivers.tokenwire.xdp,
		// so that merging it cannot change anything else.
		var xcm *corev1.ConfigMap
		for _, cm := range all[*corev1.ConfigMap](ms) {
			if cm.Name == "tokenwire-xdp-config" {
				xcm = cm
			}
		}
		if xcm == nil {
			t.Fatal("no ConfigMap tokenwire-xdp-config")
		}
		if len(xcm.Data) != 1 || xcm.Data["xdp.yaml"] == "" {
			t.Fatalf("tokenwire-xdp-config has keys %v, want only xdp.yaml", slices.Collect(maps.Keys(xcm.Data)))
		}
		cfg := collectorConfig(t, xcm.Data["xdp.yaml"])
		xdp := dig(cfg, "receivers", "tokenwire", "xdp")
		stripped := deepCopyMap(cfg)
		if tw, ok := dig(stripped, "receivers", "tokenwire").(map[string]any); ok {
			delete(tw, "xdp")
		}
		if _, ok := xdp.(map[string]any); !ok || fmt.Sprint(stripped) != "map[receivers:map[tokenwire:map[]]]" {
			t.Errorf("xdp.yaml sets more than receivers.tokenwire.xdp: %v", cfg)
		}
	})
	t.Run("OpenTelemetryCollector", func(t *testing.T) {
		base := only[*otelCollector](t, variantNamed(t, "operator").of(ms))
		got := only[*otelCollector](t, variantNamed(t, "operator, XDP").of(ms))
		want := *base
		want.Spec.HostNetwork = true
		want.Spec.SecurityContext = base.Spec.SecurityContext.DeepCopy()
		want.Spec.SecurityContext.Capabilities.Add = append(want.Spec.SecurityContext.Capabilities.Add, "NET_ADMIN")
		// The config differs by receivers.tokenwire.xdp alone.
		xdp, ok := dig(got.Spec.Config, "receivers", "tokenwire", "xdp").(map[string]any)
		if !ok {
			t.Fatal("operator/xdp: no receivers.tokenwire.xdp")
		}
		if dig(base.Spec.Config, "receivers", "tokenwire", "xdp") != nil {
			t.Fatal("operator: the base sets receivers.tokenwire.xdp")
		}
		want.Spec.Config = mergeMaps(deepCopyMap(base.Spec.Config),
			map[string]any{"receivers": map[string]any{"tokenwire": map[string]any{"xdp": xdp}}})
		if !apiequality.Semantic.DeepEqual(&want, got) {
			t.Errorf("operator/xdp/opentelemetrycollector.yaml differs from operator/opentelemetrycollector.yaml beyond the documented changes:\n%s",
				jsonDiff(t, &want, got))
		}
	})
}

// deepCopyMap copies nested maps (the leaves are shared).
func deepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if vm, ok := v.(map[string]any); ok {
			v = deepCopyMap(vm)
		}
		out[k] = v
	}
	return out
}

// jsonDiff shows where two objects differ: their indented JSON, the lines
// that differ between the first and the last difference.
func jsonDiff(t *testing.T, want, got any) string {
	t.Helper()
	a, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	i := 0
	for i < len(al) && i < len(bl) && al[i] == bl[i] {
		i++
	}
	ja, jb := len(al), len(bl)
	for ja > i && jb > i && al[ja-1] == bl[jb-1] {
		ja--
		jb--
	}
	var out strings.Builder
	for _, l := range al[i:ja] {
		out.WriteString("- " + l + "\n")
	}
	for _, l := range bl[i:jb] {
		out.WriteString("+ " + l + "\n")
	}
	return out.String()
}
