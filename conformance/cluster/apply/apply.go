// Package apply puts Kubernetes objects (by default every object of manifests/k8s) into a cluster
// with server-side apply through the dynamic client, into one namespace chosen by the caller.
// CustomResourceDefinitions go first and are waited for until Established, so the custom objects
// after them (the InferencePool) find their API. Applying the same objects again is a no-op;
// changed objects are updated in place (the field manager forces ownership of the fields it sets).
package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/eppkit/eppkit/manifests"
)

// DefaultFieldManager is the server-side apply field manager when Options.FieldManager is "".
const DefaultFieldManager = "eppkit"

// Options configure Apply. Zero values take the defaults noted per field.
type Options struct {
	// Namespace receives every namespaced object (required when there is one). It must exist.
	// An object that names another namespace is an error.
	Namespace string
	// FieldManager is the server-side apply manager (default DefaultFieldManager).
	FieldManager string
	// Mutate, when set, is called on a copy of each object before it is applied (after the
	// namespace is set); use it to change images, replicas or the pool's failureMode. An error
	// stops Apply and is returned naming the object.
	Mutate func(*unstructured.Unstructured) error
	// CRDTimeout bounds the wait for each CRD to become Established (default 60s).
	CRDTimeout time.Duration
}

// Applier applies objects to one cluster. Create it once per rest.Config; it caches API
// discovery and refreshes it after installing CRDs.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// New returns an Applier for cfg. Errors come from building the dynamic and discovery clients.
func New(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("apply: dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("apply: discovery client: %w", err)
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Manifests applies every object of manifests/k8s (manifests.K8sObjects) with opts.
func Manifests(ctx context.Context, cfg *rest.Config, opts Options) ([]*unstructured.Unstructured, error) {
	objs, err := manifests.K8sObjects()
	if err != nil {
		return nil, err
	}
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return a.Apply(ctx, objs, opts)
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Apply applies objs in order (callers put CRDs first, as manifests.ReadObjects does), waiting
// after each CRD until it is Established. It returns the objects as the API server answered.
// Errors name the object (kind/name) and stop at the first failure; objs are not modified.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts Options) ([]*unstructured.Unstructured, error) {
	if opts.FieldManager == "" {
		opts.FieldManager = DefaultFieldManager
	}
	if opts.CRDTimeout <= 0 {
		opts.CRDTimeout = 60 * time.Second
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		o = o.DeepCopy()
		id := o.GetKind() + "/" + o.GetName()
		gvk := o.GroupVersionKind()
		mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			// A CRD applied by someone else since the last discovery: look again once.
			a.mapper.Reset()
			mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return out, fmt.Errorf("apply %s: no API for %s: %w", id, gvk, err)
		}
		var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			switch ns := o.GetNamespace(); {
			case opts.Namespace == "" && ns == "":
				return out, fmt.Errorf("apply %s: Options.Namespace is empty and the object names no namespace", id)
			case ns != "" && opts.Namespace != "" && ns != opts.Namespace:
				return out, fmt.Errorf("apply %s: the object names namespace %q, Options.Namespace is %q", id, ns, opts.Namespace)
			case ns == "":
				o.SetNamespace(opts.Namespace)
			}
			ri = a.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		} else if err := perNamespace(o, opts.Namespace); err != nil {
			return out, fmt.Errorf("apply %s: %w", id, err)
		}
		if opts.Mutate != nil {
			if err := opts.Mutate(o); err != nil {
				return out, fmt.Errorf("apply %s: Mutate: %w", id, err)
			}
		}
		got, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: opts.FieldManager, Force: true})
		if err != nil {
			return out, fmt.Errorf("apply %s: %w", id, err)
		}
		out = append(out, got)
		if mapping.Resource == crdGVR {
			if err := a.waitEstablished(ctx, o.GetName(), opts.CRDTimeout); err != nil {
				return out, fmt.Errorf("apply %s: %w", id, err)
			}
			a.mapper.Reset()
		}
	}
	return out, nil
}

// waitEstablished polls the CRD until its Established condition is True.
func (a *Applier) waitEstablished(ctx context.Context, name string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := a.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" {
				if m["status"] == "True" {
					return true, nil
				}
				last = fmt.Sprintf("Established=%v: %v", m["status"], m["message"])
			}
		}
		return false, nil
	})
	if err != nil {
		if last == "" {
			last = "no Established condition yet"
		}
		return errors.Join(fmt.Errorf("CRD %s not Established within %s (%s)", name, timeout, last), err)
	}
	return nil
}

// SetImage returns a Mutate function that replaces image from with to in every container and
// init container of Deployments (and Pods); other objects pass unchanged.
func SetImage(from, to string) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		var path []string
		switch o.GetKind() {
		case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
			path = []string{"spec", "template", "spec"}
		case "Pod":
			path = []string{"spec"}
		default:
			return nil
		}
		for _, field := range []string{"containers", "initContainers"} {
			cs, ok, err := unstructured.NestedSlice(o.Object, append(path, field)...)
			if err != nil || !ok {
				continue
			}
			for i := range cs {
				c, _ := cs[i].(map[string]any)
				if c != nil && c["image"] == from {
					c["image"] = to
				}
			}
			if err := unstructured.SetNestedSlice(o.Object, cs, append(path, field)...); err != nil {
				return err
			}
		}
		return nil
	}
}

// Chain runs Mutate functions in order, stopping at the first error.
func Chain(fns ...func(*unstructured.Unstructured) error) func(*unstructured.Unstructured) error {
	return func(o *unstructured.Unstructured) error {
		for _, f := range fns {
			if err := f(o); err != nil {
				return err
			}
		}
		return nil
	}
}
