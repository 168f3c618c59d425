package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

// Registry maps plugin types to their factories, and data keys to the plugin type that is
// instantiated, with default parameters, when a config consumes the key and nobody produces it.
// A Registry is a value: build one per EPP (or per test) and fill it with plugins.RegisterAll.
type Registry struct {
	mu               sync.RWMutex
	factories        map[string]FactoryFunc
	defaultProducers map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]FactoryFunc{}, defaultProducers: map[string]string{}}
}

// Register adds a factory for pluginType. It returns an error when the type is empty, the factory
// nil, or the type already registered.
func (r *Registry) Register(pluginType string, f FactoryFunc) error {
	if pluginType == "" || f == nil {
		return fmt.Errorf("registry: plugin type and factory are required")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.factories[pluginType]; dup {
		return fmt.Errorf("registry: plugin type %q is already registered", pluginType)
	}
	r.factories[pluginType] = f
	return nil
}

// MustRegister is Register that panics on error, for static registration of built-in plugins.
func (r *Registry) MustRegister(pluginType string, f FactoryFunc) {
	if err := r.Register(pluginType, f); err != nil {
		panic(err)
	}
}

// Decorate replaces the factory of the registered pluginType with wrap(factory), so every plugin
// of that type is built through a decorator (a wrapper plugin around what the factory returns;
// eppkit's mutant builds use it to break one rule of a plugin without touching its code). It
// returns an error when the type is not registered or wrap is nil.
func (r *Registry) Decorate(pluginType string, wrap func(FactoryFunc) FactoryFunc) error {
	if wrap == nil {
		return fmt.Errorf("registry: decorator of %q is nil", pluginType)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.factories[pluginType]
	if !ok {
		return fmt.Errorf("registry: plugin type %q is not registered", pluginType)
	}
	r.factories[pluginType] = wrap(f)
	return nil
}

// RegisterDefaultProducer names pluginType as the producer instantiated (with default parameters,
// instance name = pluginType) when a config consumes dataKey and no configured plugin produces it
// (SPEC §1.1). The type must be registered before a runtime is built.
func (r *Registry) RegisterDefaultProducer(dataKey, pluginType string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.defaultProducers[dataKey] = pluginType
}

// Factory returns the factory of pluginType.
func (r *Registry) Factory(pluginType string) (FactoryFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	f, ok := r.factories[pluginType]
	return f, ok
}

// DefaultProducer returns the plugin type registered as the default producer of dataKey.
func (r *Registry) DefaultProducer(dataKey string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.defaultProducers[dataKey]
	return t, ok
}

// Types returns the registered plugin types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.factories))
	for t := range r.factories {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// DecodeParameters decodes a plugin's raw `parameters` into dst strictly: unknown fields (field
// names compared case-sensitively at the top level) and trailing data are errors. Empty or null
// params leave dst unchanged (its defaults stand). The error text names the offending field, e.g.
// `json: unknown field "blockSze"`; NewRuntime prefixes it with the plugin's path.
func DecodeParameters(params json.RawMessage, dst any) error {
	trimmed := bytes.TrimSpace(params)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil
	}
	if err := checkFieldCase(trimmed, dst); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("parameters: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("parameters: trailing data after the JSON object")
	}
	return nil
}
