package kubernetes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	HostNetwork     bool                        `json:"hostNetwork,omitempty"`
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

func TestManifestsDecodeStrictly(t *testing.T) {
	ms := loadManifests(t)
	files := map[string]bool{}
	for _, m := range ms {
		files[filepath.ToSlash(m.file)] = true
	}
	// Every manifest belongs to a variant, so the checks below see it.
	for f := range files {
		inVariant := false
		for _, v := range variants {
			inVariant = inVariant || slices.Contains(v.files, f)
		}
		if !inVariant {
			t.Errorf("%s is in no variant of this test: add it to variants", f)
		}
	}
	for _, v := range variants {
		for _, f := range v.files {
			if !files[f] {
				t.Errorf("variant %s: %s is missing or empty", v.name, f)
			}
		}
		kinds := map[string]int{}
		for _, m := range v.of(ms) {
			kinds[fmt.Sprintf("%T", m.obj)]++
		}
		want := []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.ClusterRole", "*v1.ClusterRoleBinding"}
		if v.operator {
			want = append(want, "*kubernetes.otelCollector")
		} else {
			want = append(want, "*v1.DaemonSet")
		}
		for _, k := range want {
			if kinds[k] != 1 {
				t.Errorf("variant %s: %d %s, want 1", v.name, kinds[k], k)
			}
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
	doc = []byte("apiVersion: opentelemetry.io/v1beta1\nkind: OpenTelemetryCollector\nmetadata: {name: x}\nspec:\n  mode: daemonset\n  hostnetwork: true\n  config: {}\n")
	if err := decodeStrict(doc, &otelCollector{}); err == nil {
		t.Fatal("hostnetwork (for hostNetwork) was accepted in the OpenTelemetryCollector")
	}
	doc = []byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\nautomountServiceAccountToken: true\nautomountServiceAccountToken: false\n")
	if err := decodeStrict(doc, &corev1.ServiceAccount{}); err == nil {
		t.Fatal("a duplicate key was accepted")
	}
}
