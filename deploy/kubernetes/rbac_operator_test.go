package kubernetes

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

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
	allMs := loadManifests(t)
	for _, v := range variants {
		if !v.operator {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			ms := v.of(allMs)
			oc := only[*otelCollector](t, ms)
			sa := only[*corev1.ServiceAccount](t, ms)
			if oc.Spec.Mode != "daemonset" {
				t.Errorf("mode %q, want daemonset", oc.Spec.Mode)
			}
			if !oc.Spec.HostPID {
				t.Error("hostPID is off")
			}
			if oc.Spec.HostNetwork != v.xdp {
				t.Errorf("hostNetwork %v; want it only with the XDP filter (the node's interfaces)", oc.Spec.HostNetwork)
			}
			if oc.Spec.ServiceAccount != sa.Name || oc.Namespace != sa.Namespace {
				t.Errorf("serviceAccount %s/%s, want %s/%s", oc.Namespace, oc.Spec.ServiceAccount, sa.Namespace, sa.Name)
			}
			checkSecurityContext(t, "OpenTelemetryCollector", oc.Spec.SecurityContext, v.wantCaps())
			checkHostPaths(t, "OpenTelemetryCollector", oc.Spec.VolumeMounts, oc.Spec.Volumes)
			cfg, err := yaml.Marshal(oc.Spec.Config)
			if err != nil {
				t.Fatal(err)
			}
			checkEnv(t, "OpenTelemetryCollector", oc.Spec.Env, string(cfg))
			if _, ok := dig(oc.Spec.Config, "extensions", "health_check").(map[string]any); !ok {
				t.Error("no health_check extension: the operator derives the probes from it")
			}
			checkXDPConfig(t, v, oc.Spec.Config)
		})
	}
}
