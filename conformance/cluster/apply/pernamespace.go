package apply

import (
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// PerNamespaceAnnotation marks a cluster-scoped object that belongs to the namespace the
// manifests are applied to (the reference EPP's ClusterRoleBinding for --metrics-endpoint-auth:
// tokenreviews and subjectaccessreviews are cluster-scoped, so a RoleBinding cannot grant them).
// With it set to "true", Apply names the object <name>-<namespace>, so the runs of several
// namespaces each keep their own, and puts every ServiceAccount subject without a namespace in
// that namespace, as a RoleBinding would.
const PerNamespaceAnnotation = "eppkit.io/per-namespace"

// perNamespace applies PerNamespaceAnnotation to the cluster-scoped object o.
func perNamespace(o *unstructured.Unstructured, ns string) error {
	if o.GetAnnotations()[PerNamespaceAnnotation] != "true" {
		return nil
	}
	if ns == "" {
		return errors.New("Options.Namespace is empty and the object is per namespace (" + PerNamespaceAnnotation + ")")
	}
	o.SetName(o.GetName() + "-" + ns)
	subjects, found, err := unstructured.NestedSlice(o.Object, "subjects")
	if err != nil || !found {
		return err
	}
	for _, s := range subjects {
		m, ok := s.(map[string]any)
		if ok && m["kind"] == "ServiceAccount" && m["namespace"] == nil {
			m["namespace"] = ns
		}
	}
	return unstructured.SetNestedSlice(o.Object, subjects, "subjects")
}
