package kubernetes

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// wantHostPaths are the host paths the collector mounts, read-only, each
// at the same path. Only tracefs: classic tracepoints (a hook fallback)
// read their IDs from it, and the container's own /sys has an empty
// kernel/tracing. Kernel BTF (/sys/kernel/btf) is in the container's own
// sysfs; bpffs (/sys/fs/bpf) is only for pinning, and tokenwire pins
// nothing; /proc is the host's through hostPID.
var wantHostPaths = []string{"/sys/kernel/tracing"}

// checkSecurityContext checks the container's privileges: no privileged
// mode, exactly the capabilities wantCaps after dropping ALL, UID 0 (added
// capabilities are effective only for root: Kubernetes sets no ambient
// capabilities), no privilege escalation, a read-only root filesystem and
// a confining seccomp profile.
func checkSecurityContext(t *testing.T, what string, sc *corev1.SecurityContext, wantCaps []string) {
	t.Helper()
	if sc == nil {
		t.Fatalf("%s: no securityContext", what)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("%s: privileged; want the capability list", what)
	}
	if sc.Capabilities == nil {
		t.Fatalf("%s: no capabilities", what)
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	if !slices.Equal(add, wantCaps) {
		t.Errorf("%s: capabilities.add %v, want exactly %v", what, add, wantCaps)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: capabilities.drop %v, want [ALL]", what, sc.Capabilities.Drop)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser must be 0: added capabilities are only effective for root", what)
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
		t.Errorf("%s: runAsNonRoot with runAsUser 0 would never start", what)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem must be true", what)
	}
	if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
		t.Errorf("%s: procMount %s, want Default", what, *sc.ProcMount)
	}
	checkSeccomp(t, what, sc.SeccompProfile, true)
}

// checkSeccomp checks a seccomp profile: never Unconfined; where required,
// set to RuntimeDefault (containerd >= 1.6.9 and CRI-O >= 1.31 allow bpf()
// with CAP_BPF and perf_event_open() with CAP_PERFMON) or a Localhost
// profile.
func checkSeccomp(t *testing.T, what string, p *corev1.SeccompProfile, required bool) {
	t.Helper()
	switch {
	case p == nil:
		if required {
			t.Errorf("%s: no seccompProfile; want RuntimeDefault", what)
		}
	case p.Type == corev1.SeccompProfileTypeUnconfined:
		t.Errorf("%s: seccompProfile Unconfined; want RuntimeDefault", what)
	case p.Type == corev1.SeccompProfileTypeLocalhost && (p.LocalhostProfile == nil || *p.LocalhostProfile == ""):
		t.Errorf("%s: seccompProfile Localhost without localhostProfile", what)
	case p.Type != corev1.SeccompProfileTypeRuntimeDefault && p.Type != corev1.SeccompProfileTypeLocalhost:
		t.Errorf("%s: seccompProfile type %q", what, p.Type)
	}
}

// checkHostPaths checks that the only host paths mounted are
// wantHostPaths, read-only, at the same path, without mount propagation.
func checkHostPaths(t *testing.T, what string, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
	t.Helper()
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
			if v.HostPath.Path == "/sys/fs/bpf" {
				t.Errorf("%s: bpffs (/sys/fs/bpf) is a volume: tokenwire pins nothing", what)
			}
		}
	}
	mounted := map[string]bool{}
	for _, m := range mounts {
		hp, ok := hostPaths[m.Name]
		if !ok {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("%s: hostPath %s is mounted read-write", what, hp)
		}
		if m.MountPath != hp {
			t.Errorf("%s: hostPath %s is mounted at %s; tokenwire looks for it at the same path", what, hp, m.MountPath)
		}
		if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
			t.Errorf("%s: hostPath %s has mount propagation %s", what, hp, *m.MountPropagation)
		}
		mounted[hp] = true
	}
	var got []string
	for _, hp := range hostPaths {
		got = append(got, hp)
	}
	slices.Sort(got)
	if !slices.Equal(got, wantHostPaths) {
		t.Errorf("%s: hostPath volumes %v, want exactly %v", what, got, wantHostPaths)
	}
	for _, hp := range wantHostPaths {
		if !mounted[hp] {
			t.Errorf("%s: %s is not mounted", what, hp)
		}
	}
}

// checkNoUnconfined fails on any Unconfined seccomp profile anywhere in
// the manifests, the pod level included.
func checkNoUnconfined(t *testing.T, ms []manifest) {
	t.Helper()
	for _, ds := range all[*appsv1.DaemonSet](ms) {
		pod := ds.Spec.Template.Spec
		if pod.SecurityContext != nil {
			checkSeccomp(t, "DaemonSet pod", pod.SecurityContext.SeccompProfile, false)
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			if c.SecurityContext != nil {
				checkSeccomp(t, "DaemonSet container "+c.Name, c.SecurityContext.SeccompProfile, false)
			}
		}
	}
}

func TestNoUnconfinedSeccomp(t *testing.T) {
	checkNoUnconfined(t, loadManifests(t))
	// Nor in any file: a profile written in a way the types above miss.
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(stripComments(b), []byte("Unconfined")) {
			t.Errorf("%s: Unconfined outside a comment", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
