package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/eppkit/eppkit/conformance/endpointsource"
	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
)

// TargetOptions are the options a target factory may use (Options.Command, Options.Address and
// Options.HealthAddress).
type TargetOptions struct {
	// Command is the command template (--command; command target).
	Command string
	// Address is an already running EPP's ext_proc host:port (--address; address target).
	Address string
	// HealthAddress is the gRPC health host:port of an address target ("" = Address).
	HealthAddress string
}

// TargetFactory builds a target from the options; errors name the missing option.
type TargetFactory func(opts TargetOptions) (harness.Target, error)

// SourceFactory builds an endpoint source.
type SourceFactory func() (harness.EndpointSource, error)

// The built-in targets (command, address) and endpoint sources (static, apiserver); the
// eppkit-specific ones (reference, cluster) are registered by conformance/wiring.
var (
	registryNamesMu sync.Mutex
	targets         = map[string]TargetFactory{
		"command": func(o TargetOptions) (harness.Target, error) { return target.NewCommandTarget("command", o.Command) },
		"address": func(o TargetOptions) (harness.Target, error) {
			return target.NewAddressTarget(o.Address, o.HealthAddress)
		},
	}
	sources = map[string]SourceFactory{
		"static": func() (harness.EndpointSource, error) { return endpointsource.StaticSource{}, nil },
		// A real kube-apiserver + etcd from the tools cache holding the InferencePool, Ready
		// Pods, the conformance InferenceObjectives (harness.Objectives) and the conformance
		// InferenceModelRewrite (harness.ModelRewriteName).
		// It also holds the llm-d.ai group test's objects, each in one API group
		// (harness.GroupObjectives, harness.GroupModelRewrites).
		"apiserver": func() (harness.EndpointSource, error) {
			opts := apiserver.Options{Objectives: harness.Objectives(),
				ModelRewrites: []apiserver.ModelRewrite{apiserver.ConformanceModelRewrite()}}
			for _, o := range harness.GroupObjectives() {
				gvk := apiserver.InferenceObjectiveGVK
				gvk.Group = o.Group
				opts.GroupObjectives = append(opts.GroupObjectives, apiserver.GroupObjective{GVK: gvk, Name: o.Name, Priority: o.Priority})
			}
			for _, rw := range harness.GroupModelRewrites() {
				gvk := apiserver.InferenceModelRewriteGVK
				gvk.Group = rw.Group
				opts.ModelRewrites = append(opts.ModelRewrites, apiserver.ModelRewrite{Name: rw.Name, Alias: rw.Alias,
					Targets: []harness.RewriteTarget{{Model: rw.Target, Weight: 1}}, GVK: gvk})
			}
			return apiserver.NewSource(opts), nil
		},
	}
)

// RegisterTarget adds a named target (conformance/wiring registers "reference" and "cluster"). It
// panics on a duplicate name: it is called from init().
func RegisterTarget(name string, f TargetFactory) {
	registryNamesMu.Lock()
	defer registryNamesMu.Unlock()
	if _, dup := targets[name]; dup {
		panic("conformance.RegisterTarget: duplicate target " + name)
	}
	targets[name] = f
}

// TargetNames lists the registered targets, sorted.
func TargetNames() []string {
	registryNamesMu.Lock()
	defer registryNamesMu.Unlock()
	return sortedKeys(targets)
}

// NewTarget builds the named target; an unknown name is an error naming --target.
func NewTarget(name string, opts TargetOptions) (harness.Target, error) {
	registryNamesMu.Lock()
	f, ok := targets[name]
	registryNamesMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("--target: unknown target %q (have %v)", name, TargetNames())
	}
	return f(opts)
}

// RegisterEndpointSource adds a named endpoint source; it panics on a duplicate name.
func RegisterEndpointSource(name string, f SourceFactory) {
	registryNamesMu.Lock()
	defer registryNamesMu.Unlock()
	if _, dup := sources[name]; dup {
		panic("conformance.RegisterEndpointSource: duplicate source " + name)
	}
	sources[name] = f
}

// EndpointSourceNames lists the registered endpoint sources, sorted.
func EndpointSourceNames() []string {
	registryNamesMu.Lock()
	defer registryNamesMu.Unlock()
	return sortedKeys(sources)
}

// NewEndpointSource builds the named source; an unknown name is an error naming --endpoint-source.
func NewEndpointSource(name string) (harness.EndpointSource, error) {
	registryNamesMu.Lock()
	f, ok := sources[name]
	registryNamesMu.Unlock()
	if !ok {
		return nil, errors.New("--endpoint-source: unknown source " + strconv.Quote(name) + " (have " +
			strings.Join(EndpointSourceNames(), ", ") + ")")
	}
	return f()
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
