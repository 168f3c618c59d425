package conformance

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
)

// StaticSource is the "static" endpoint source: the target is told the fleet's addresses on its
// command line ({{.Endpoints}}). It cannot change the pool while the target runs.
type StaticSource struct{}

// Name implements EndpointSource.
func (StaticSource) Name() string { return "static" }

// Start implements EndpointSource: Env.Endpoints is addrs joined by commas.
func (StaticSource) Start(_ context.Context, addrs []string) (Env, error) {
	if len(addrs) == 0 {
		return Env{}, errors.New("static endpoint source: no endpoint addresses")
	}
	return Env{Endpoints: strings.Join(addrs, ",")}, nil
}

// SetReady implements EndpointSource: unsupported (ErrUnsupported).
func (StaticSource) SetReady(context.Context, string, bool) error { return ErrUnsupported }

// Stop implements EndpointSource.
func (StaticSource) Stop(context.Context) error { return nil }

// SourceFactory builds an endpoint source; cmd/ registers "apiserver" (conformance/apiserver).
type SourceFactory func() (EndpointSource, error)

var sources = map[string]SourceFactory{"static": func() (EndpointSource, error) { return StaticSource{}, nil }}

// RegisterEndpointSource adds a named source; it panics on a duplicate name.
func RegisterEndpointSource(name string, f SourceFactory) {
	targetsMu.Lock()
	defer targetsMu.Unlock()
	if _, dup := sources[name]; dup {
		panic("conformance.RegisterEndpointSource: duplicate source " + name)
	}
	sources[name] = f
}

// NewEndpointSource builds the named source; an unknown name is an error naming --endpoint-source.
func NewEndpointSource(name string) (EndpointSource, error) {
	targetsMu.Lock()
	f, ok := sources[name]
	var names []string
	for n := range sources {
		names = append(names, n)
	}
	targetsMu.Unlock()
	if !ok {
		return nil, errors.New("--endpoint-source: unknown source " + strconv.Quote(name) + " (have " + strings.Join(sorted(names), ", ") + ")")
	}
	return f()
}

func sorted(s []string) []string { sort.Strings(s); return s }
