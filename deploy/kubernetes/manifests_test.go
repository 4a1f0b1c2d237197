package kubernetes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// otelCollector mirrors the fields of the OpenTelemetry Operator's
// OpenTelemetryCollector (opentelemetry.io/v1beta1) that our example uses,
// with the operator's JSON names and the same Kubernetes types
// (github.com/open-telemetry/opentelemetry-operator/apis/v1beta1). The
// operator's own API module is not served by the Go module proxy, so the
// test decodes strictly into this mirror: a field the example adds must be
// added here, against the operator's API, or the test fails.
type otelCollector struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              otelCollectorSpec `json:"spec"`
}

type otelCollectorSpec struct {
	Mode            string                      `json:"mode"`
	Image           string                      `json:"image,omitempty"`
	ServiceAccount  string                      `json:"serviceAccount,omitempty"`
	HostPID         bool                        `json:"hostPID,omitempty"`
	Tolerations     []corev1.Toleration         `json:"tolerations,omitempty"`
	PodAnnotations  map[string]string           `json:"podAnnotations,omitempty"`
	Env             []corev1.EnvVar             `json:"env,omitempty"`
	SecurityContext *corev1.SecurityContext     `json:"securityContext,omitempty"`
	Resources       corev1.ResourceRequirements `json:"resources,omitempty"`
	ReadinessProbe  *operatorProbe              `json:"readinessProbe,omitempty"`
	LivenessProbe   *operatorProbe              `json:"livenessProbe,omitempty"`
	VolumeMounts    []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
	Volumes         []corev1.Volume             `json:"volumes,omitempty"`
	// Config is the collector configuration as an object (v1beta1); it is
	// checked by the collector's own validate command.
	Config map[string]any `json:"config"`
}

// operatorProbe is the operator's Probe: timings only, the handler comes
// from the health_check extension.
type operatorProbe struct {
	InitialDelaySeconds           *int32 `json:"initialDelaySeconds,omitempty"`
	TimeoutSeconds                *int32 `json:"timeoutSeconds,omitempty"`
	PeriodSeconds                 *int32 `json:"periodSeconds,omitempty"`
	SuccessThreshold              *int32 `json:"successThreshold,omitempty"`
	FailureThreshold              *int32 `json:"failureThreshold,omitempty"`
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// newObject returns an empty object of the type that apiVersion/kind
// names, or nil for a kind the manifests should not contain.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/Namespace":
		return &corev1.Namespace{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "apps/v1/DaemonSet":
		return &appsv1.DaemonSet{}
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "opentelemetry.io/v1beta1/OpenTelemetryCollector":
		return &otelCollector{}
	}
	return nil
}

// manifest is one decoded YAML document.
type manifest struct {
	file string // relative to this directory
	obj  any
}

// loadManifests decodes every document of every *.yaml file under this
// directory strictly (unknown or duplicate fields fail) into its Kubernetes
// API type.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				return fmt.Errorf("%s document %d: %w", path, i, err)
			}
			obj := newObject(tm.APIVersion, tm.Kind)
			if obj == nil {
				return fmt.Errorf("%s document %d: unexpected kind %s %s", path, i, tm.APIVersion, tm.Kind)
			}
			if err := decodeStrict(doc, obj); err != nil {
				return fmt.Errorf("%s document %d (%s): %w", path, i, tm.Kind, err)
			}
			out = append(out, manifest{file: path, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeStrict decodes a YAML document the way the API server does with
// strict field validation: duplicate keys, unknown fields and fields that
// match only case-insensitively are errors. (encoding/json, under
// sigs.k8s.io/yaml.UnmarshalStrict, would accept "hostPid" for "hostPID".)
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// stripComments drops comment-only lines, so a document of comments is
// recognised as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
		}
	}
	return b.Bytes()
}

// only returns the single object of type T, failing unless there is
// exactly one.
func only[T any](t *testing.T, ms []manifest) T {
	t.Helper()
	var found []T
	for _, m := range ms {
		if o, ok := m.obj.(T); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

func TestManifestsDecodeStrictly(t *testing.T) {
	ms := loadManifests(t)
	kinds := map[string]int{}
	for _, m := range ms {
		kinds[fmt.Sprintf("%T", m.obj)]++
	}
	for _, want := range []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.ClusterRole", "*v1.ClusterRoleBinding",
		"*v1.ConfigMap", "*v1.DaemonSet", "*kubernetes.otelCollector"} {
		if kinds[want] != 1 {
			t.Errorf("%s: %d in the manifests, want 1", want, kinds[want])
		}
	}
}

// TestStrictDecodingRejectsUnknownFields proves the decoding above catches
// a misspelt field, a wrongly cased one included, and a duplicate key.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n")
	if err := decodeStrict(doc, &appsv1.DaemonSet{}); err == nil {
		t.Fatal("hostPid (for hostPID) was accepted")
	}
	doc = []byte("apiVersion: opentelemetry.io/v1beta1\nkind: OpenTelemetryCollector\nmetadata: {name: x}\nspec:\n  mode: daemonset\n  hostPid: true\n  config: {}\n")
	if err := decodeStrict(doc, &otelCollector{}); err == nil {
		t.Fatal("hostPid (for hostPID) was accepted in the OpenTelemetryCollector")
	}
	doc = []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomountServiceAccountToken: true\nautomountServiceAccountToken: false\n")
	if err := decodeStrict(doc, &corev1.ServiceAccount{}); err == nil {
		t.Fatal("a duplicate key was accepted")
	}
}

// wantMounts are the read-only host paths the collector needs.
var wantMounts = []string{"/sys/kernel/btf", "/sys/fs/bpf", "/sys/kernel/tracing"}

// checkPod checks what the DaemonSet and the operator's resource share:
// the minimal capabilities instead of privileged, and read-only hostPath
// mounts of BTF, bpffs and tracefs.
func checkPod(t *testing.T, what string, sc *corev1.SecurityContext, mounts []corev1.VolumeMount, volumes []corev1.Volume) {
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
	if want := []string{"BPF", "NET_ADMIN", "PERFMON"}; !slices.Equal(add, want) {
		t.Errorf("%s: capabilities.add %v, want %v", what, add, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s: capabilities.drop %v, want [ALL]", what, sc.Capabilities.Drop)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("%s: runAsUser must be 0: added capabilities are only effective for root", what)
	}
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
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
		mounted[hp] = true
	}
	for _, p := range wantMounts {
		if !mounted[p] {
			t.Errorf("%s: %s is not mounted", what, p)
		}
	}
	if len(mounted) != len(wantMounts) {
		t.Errorf("%s: host paths mounted %v, want exactly %v", what, mounted, wantMounts)
	}
}

func TestDaemonSet(t *testing.T) {
	ms := loadManifests(t)
	ds := only[*appsv1.DaemonSet](t, ms)
	sa := only[*corev1.ServiceAccount](t, ms)
	cm := only[*corev1.ConfigMap](t, ms)
	pod := ds.Spec.Template.Spec

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("selector %s does not match the pod template's labels %v", sel, ds.Spec.Template.Labels)
	}
	if ds.Namespace != sa.Namespace || ds.Namespace != cm.Namespace {
		t.Errorf("namespaces differ: DaemonSet %q, ServiceAccount %q, ConfigMap %q", ds.Namespace, sa.Namespace, cm.Namespace)
	}
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if !pod.HostPID {
		t.Error("hostPID is off: tokenwire's process.pid and container.id need the host's /proc")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkPod(t, "DaemonSet", c.SecurityContext, c.VolumeMounts, pod.Volumes)

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}

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
	cfg := collectorConfig(t, cm.Data["config.yaml"])
	hc := dig(cfg, "extensions", "health_check", "endpoint")
	if !strings.HasSuffix(fmt.Sprint(hc), fmt.Sprintf(":%d", probePort)) {
		t.Errorf("readiness probe on port %d, health_check listens on %v", probePort, hc)
	}

	// The config is mounted, and what it reads from the environment is set.
	var cmMounted bool
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
			cmMounted = true
		}
	}
	if !cmMounted {
		t.Errorf("ConfigMap %s is not a volume of the pod", cm.Name)
	}
	checkEnv(t, "DaemonSet", c.Env, cm.Data["config.yaml"])
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

func TestRBAC(t *testing.T) {
	ms := loadManifests(t)
	sa := only[*corev1.ServiceAccount](t, ms)
	role := only[*rbacv1.ClusterRole](t, ms)
	binding := only[*rbacv1.ClusterRoleBinding](t, ms)
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name {
		t.Errorf("binding refers to %s %s, want ClusterRole %s", binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" ||
		binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding subjects %+v, want ServiceAccount %s/%s", binding.Subjects, sa.Namespace, sa.Name)
	}
	// What the k8s_attributes processor reads, per its README: pods and
	// namespaces, and replicasets for k8s.deployment.name.
	need := map[string]string{"pods": "", "namespaces": "", "replicasets": "apps"}
	for res, group := range need {
		ok := false
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, res) &&
				slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "list") && slices.Contains(r.Verbs, "watch") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("ClusterRole does not grant get, list, watch on %s (group %q)", res, group)
		}
	}
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("ClusterRole grants %q on %v: the collector only reads", v, r.Resources)
			}
		}
	}
}

func TestOperatorCollector(t *testing.T) {
	ms := loadManifests(t)
	oc := only[*otelCollector](t, ms)
	sa := only[*corev1.ServiceAccount](t, ms)
	if oc.Spec.Mode != "daemonset" {
		t.Errorf("mode %q, want daemonset", oc.Spec.Mode)
	}
	if !oc.Spec.HostPID {
		t.Error("hostPID is off")
	}
	if oc.Spec.ServiceAccount != sa.Name || oc.Namespace != sa.Namespace {
		t.Errorf("serviceAccount %s/%s, want %s/%s", oc.Namespace, oc.Spec.ServiceAccount, sa.Namespace, sa.Name)
	}
	checkPod(t, "OpenTelemetryCollector", oc.Spec.SecurityContext, oc.Spec.VolumeMounts, oc.Spec.Volumes)
	cfg, err := yaml.Marshal(oc.Spec.Config)
	if err != nil {
		t.Fatal(err)
	}
	checkEnv(t, "OpenTelemetryCollector", oc.Spec.Env, string(cfg))
	if _, ok := dig(oc.Spec.Config, "extensions", "health_check").(map[string]any); !ok {
		t.Error("no health_check extension: the operator derives the probes from it")
	}
}

// TestCollectorConfigs checks the two embedded collector configurations:
// they associate pods by container.id, and the built collector validates
// them.
func TestCollectorConfigs(t *testing.T) {
	ms := loadManifests(t)
	cm := only[*corev1.ConfigMap](t, ms)
	oc := only[*otelCollector](t, ms)
	ocYAML, err := yaml.Marshal(oc.Spec.Config)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]string{
		"configmap.yaml":                       cm.Data["config.yaml"],
		"operator/opentelemetrycollector.yaml": string(ocYAML),
	}
	for name, text := range configs {
		cfg := collectorConfig(t, text)
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
	for name, text := range configs {
		path := filepath.Join(dir, strings.ReplaceAll(name, "/", "_"))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "validate", "--config", path)
		// What the pod's environment would hold.
		cmd.Env = append(os.Environ(), "POD_IP=192.0.2.7", "K8S_NODE_NAME=node-1",
			"OTLP_TRACES_ENDPOINT=tempo.observability.svc.cluster.local:4317")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %s validate: %v\n%s", name, bin, err, out)
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
