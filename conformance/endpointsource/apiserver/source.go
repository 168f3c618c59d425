package apiserver

import (
	"context"
	"errors"
	"sync"

	"github.com/eppkit/eppkit/conformance/harness"
)

// Source is the "apiserver" harness.EndpointSource: Start brings up a control plane holding
// the pool (see Start), SetReady flips a Pod's Ready condition, Stop tears it all down.
// cmd/eppkit registers it with conformance.RegisterEndpointSource("apiserver", ...).
type Source struct {
	// Options are the template for Start; Endpoints is replaced by Start's addrs.
	Options Options

	mu  sync.Mutex
	env *Env
}

var _ harness.EndpointSource = (*Source)(nil)

// NewSource returns a Source that starts with opts (Endpoints ignored).
func NewSource(opts Options) *Source { return &Source{Options: opts} }

// Name implements harness.EndpointSource.
func (*Source) Name() string { return "apiserver" }

// Start implements harness.EndpointSource: it starts the control plane with an InferencePool
// and one Ready Pod per addr and returns the kubeconfig path and the pool's name and namespace.
// A second Start before Stop is an error.
func (s *Source) Start(ctx context.Context, addrs []string) (harness.Env, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.env != nil {
		return harness.Env{}, errors.New("apiserver endpoint source: already started")
	}
	opts := s.Options
	opts.Endpoints = addrs
	env, err := Start(ctx, opts)
	if err != nil {
		return harness.Env{}, err
	}
	s.env = env
	return harness.Env{Kubeconfig: env.KubeconfigPath, PoolName: env.PoolName, PoolNamespace: env.PoolNamespace,
		Details: "control plane: " + env.Binaries, GroupObjects: len(opts.GroupObjectives) > 0}, nil
}

// SetReady implements harness.EndpointSource (Env.SetReady).
func (s *Source) SetReady(ctx context.Context, addr string, ready bool) error {
	env := s.Env()
	if env == nil {
		return errors.New("apiserver endpoint source: SetReady before Start")
	}
	return env.SetReady(ctx, addr, ready)
}

// Env is the running environment (nil before Start and after Stop), for tests that need more
// than the interface: DeletePod, AddPod, PutObjective, the clients, LogTail.
func (s *Source) Env() *Env {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env
}

// Stop implements harness.EndpointSource: it stops kube-apiserver and etcd.
func (s *Source) Stop(context.Context) error {
	s.mu.Lock()
	env := s.env
	s.env = nil
	s.mu.Unlock()
	if env == nil {
		return nil
	}
	return env.Stop()
}

var _ harness.PoolEditor = (*Source)(nil)

// RemoveEndpoint implements harness.PoolEditor: addr's Pod is deleted (Env.DeletePod).
func (s *Source) RemoveEndpoint(ctx context.Context, addr string) error {
	env := s.Env()
	if env == nil {
		return errors.New("apiserver endpoint source: RemoveEndpoint before Start")
	}
	return env.DeletePod(ctx, addr)
}

// AddEndpoint implements harness.PoolEditor: a Running, Ready Pod with addr's IP is created
// (Env.AddPod; the port must be the pool's targetPort).
func (s *Source) AddEndpoint(ctx context.Context, addr string) error {
	env := s.Env()
	if env == nil {
		return errors.New("apiserver endpoint source: AddEndpoint before Start")
	}
	return env.AddPod(ctx, addr)
}

var _ harness.SidePoolSource = (*Source)(nil)

// StartSidePool implements harness.SidePoolSource: NewPool writes the InferencePool name (in a
// namespace of its own, also called name, so that the run's InferenceObjectives can exist for it
// too: an objective names one pool and objective names are unique in a namespace; targetPorts =
// the addresses' ports, one per data-parallel rank), the run's InferenceObjectives and one Ready
// Pod per IP into the running kube-apiserver. Its objects stay until Stop.
func (s *Source) StartSidePool(ctx context.Context, name string, addrs []string) (harness.Env, error) {
	env := s.Env()
	if env == nil {
		return harness.Env{}, errors.New("apiserver endpoint source: StartSidePool before Start")
	}
	side, err := NewPool(ctx, env.ControlPlane, Options{PoolName: name, PoolNamespace: harness.SidePoolNamespace(name), Endpoints: addrs, Objectives: s.Options.Objectives})
	if err != nil {
		return harness.Env{}, err
	}
	return harness.Env{Kubeconfig: side.KubeconfigPath, PoolName: side.PoolName, PoolNamespace: side.PoolNamespace}, nil
}

var _ harness.AppProtocolSidePoolSource = (*Source)(nil)

// StartSidePoolAppProtocol implements harness.AppProtocolSidePoolSource: StartSidePool with the
// InferencePool's spec.appProtocol set to appProtocol.
func (s *Source) StartSidePoolAppProtocol(ctx context.Context, name string, addrs []string, appProtocol string) (harness.Env, error) {
	env := s.Env()
	if env == nil {
		return harness.Env{}, errors.New("apiserver endpoint source: StartSidePoolAppProtocol before Start")
	}
	side, err := NewPool(ctx, env.ControlPlane, Options{PoolName: name, PoolNamespace: harness.SidePoolNamespace(name), Endpoints: addrs,
		Objectives: s.Options.Objectives, AppProtocol: appProtocol})
	if err != nil {
		return harness.Env{}, err
	}
	return harness.Env{Kubeconfig: side.KubeconfigPath, PoolName: side.PoolName, PoolNamespace: side.PoolNamespace}, nil
}

// StartSidePoolShared implements harness.SharedNamespaceSidePoolSource: StartSidePool with the
// pool in the run's namespace, beside the run's pool (the run's objectives are already there).
func (s *Source) StartSidePoolShared(ctx context.Context, name string, addrs []string) (harness.Env, error) {
	env := s.Env()
	if env == nil {
		return harness.Env{}, errors.New("apiserver endpoint source: StartSidePoolShared before Start")
	}
	side, err := NewPool(ctx, env.ControlPlane, Options{PoolName: name, PoolNamespace: env.PoolNamespace, Endpoints: addrs})
	if err != nil {
		return harness.Env{}, err
	}
	return harness.Env{Kubeconfig: side.KubeconfigPath, PoolName: side.PoolName, PoolNamespace: side.PoolNamespace}, nil
}
