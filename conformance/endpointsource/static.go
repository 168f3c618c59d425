// Package endpointsource holds the static endpoint source: the target EPP is told the fleet's
// addresses on its command line. The apiserver source (a real kube-apiserver holding an
// InferencePool and Ready Pods) is its subpackage apiserver.
package endpointsource

import (
	"context"
	"errors"
	"strings"

	"github.com/eppkit/eppkit/conformance/harness"
)

// StaticSource is the "static" endpoint source: the target is told the fleet's addresses on its
// command line ({{.Endpoints}}). It cannot change the pool while the target runs.
type StaticSource struct{}

// Name implements harness.EndpointSource.
func (StaticSource) Name() string { return "static" }

// Start implements harness.EndpointSource: Env.Endpoints is addrs joined by commas.
func (StaticSource) Start(_ context.Context, addrs []string) (harness.Env, error) {
	if len(addrs) == 0 {
		return harness.Env{}, errors.New("static endpoint source: no endpoint addresses")
	}
	return harness.Env{Endpoints: strings.Join(addrs, ",")}, nil
}

// SetReady implements harness.EndpointSource: unsupported (ErrUnsupported).
func (StaticSource) SetReady(context.Context, string, bool) error { return harness.ErrUnsupported }

// Stop implements harness.EndpointSource.
func (StaticSource) Stop(context.Context) error { return nil }

// StartSidePool implements harness.SidePoolSource: Env.Endpoints is addrs joined by commas.
func (s StaticSource) StartSidePool(ctx context.Context, _ string, addrs []string) (harness.Env, error) {
	return s.Start(ctx, addrs)
}
