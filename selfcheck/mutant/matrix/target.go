package matrix

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/selfcheck/mutant"
	"github.com/eppkit/eppkit/selfcheck/mutant/interceptor"
)

// InterceptedTargetName is the conformance target of mutant builds that runs an EPP behind the
// mutant interceptor (RegisterInterceptedTarget).
const InterceptedTargetName = "intercepted"

// InterceptedCommandEnv is the environment variable that gives the intercepted target the
// command template of the EPP behind the interceptor; empty or unset means
// target.ReferenceCommand (the reference EPP of this binary).
const InterceptedCommandEnv = "EPPKIT_INTERCEPTED_COMMAND"

// RegisterInterceptedTarget registers the "intercepted" conformance target: the EPP of the
// command template in $EPPKIT_INTERCEPTED_COMMAND (default: the reference) behind the mutant
// interceptor, with the protocol mutant named by $EPPKIT_MUTANT (mutant.Active; none = a
// transparent proxy). Only mutant builds call it (cmd/eppkit, tag eppkit_mutants); the matrix
// sets both variables for each run.
func RegisterInterceptedTarget() {
	conformance.RegisterTarget(InterceptedTargetName, func(conformance.TargetOptions) (harness.Target, error) {
		text := os.Getenv(InterceptedCommandEnv)
		if text == "" {
			text = target.ReferenceCommand
		}
		inner, err := target.NewCommandTarget(InterceptedTargetName, text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", InterceptedCommandEnv, err)
		}
		m := mutant.Active()
		if mm, ok := mutant.Lookup(m); ok && mm.Via != mutant.Interceptor {
			m = "" // a mutant of the reference itself: the interceptor stays transparent
		}
		return NewInterceptedTarget(inner, m), nil
	})
}

// InterceptedTarget is a command target behind the mutant interceptor: Start starts the EPP,
// then an interceptor on a free 127.0.0.1 port in front of its ext_proc (and health) address,
// and reports the interceptor's address as the target's.
type InterceptedTarget struct {
	inner  *target.CommandTarget
	mutant mutant.Name
	ic     *interceptor.Interceptor
}

// NewInterceptedTarget wraps inner; m is a protocol mutant ("" = transparent).
func NewInterceptedTarget(inner *target.CommandTarget, m mutant.Name) *InterceptedTarget {
	return &InterceptedTarget{inner: inner, mutant: m}
}

// Name implements harness.Target.
func (t *InterceptedTarget) Name() string { return t.inner.Name() }

// Start implements harness.Target. The interceptor's health service proxies the EPP's, so
// an EPP that serves health only on its ext_proc port is probed through the interceptor too.
func (t *InterceptedTarget) Start(ctx context.Context, env harness.TargetEnv) (harness.TargetAddrs, error) {
	a, err := t.inner.Start(ctx, env)
	if err != nil {
		return a, err
	}
	ic, err := interceptor.Start("127.0.0.1:0", interceptor.Options{Upstream: a.GRPC, UpstreamHealth: a.Health,
		Mutant: t.mutant, SheddableObjective: harness.SheddableObjective})
	if err != nil {
		return harness.TargetAddrs{}, errors.Join(err, t.inner.Stop(10*time.Second))
	}
	t.ic = ic
	out := harness.TargetAddrs{GRPC: ic.Addr(), Health: a.Health, Metrics: a.Metrics}
	if a.Health == a.GRPC {
		out.Health = ic.Addr()
	}
	return out, nil
}

// Exited implements harness.Target (the EPP's process).
func (t *InterceptedTarget) Exited() <-chan struct{} { return t.inner.Exited() }

// ExitErr implements harness.Target.
func (t *InterceptedTarget) ExitErr() error { return t.inner.ExitErr() }

// Stop implements harness.Target: the interceptor, then the EPP.
func (t *InterceptedTarget) Stop(timeout time.Duration) error {
	var err error
	if t.ic != nil {
		err = t.ic.Close()
	}
	return errors.Join(err, t.inner.Stop(timeout))
}

// LogTail and LogPath are the EPP's log, for readiness errors.
func (t *InterceptedTarget) LogTail(n int) string { return t.inner.LogTail(n) }

// LogPath is the EPP's log file.
func (t *InterceptedTarget) LogPath() string { return t.inner.LogPath() }

// NewInstance implements harness.InstanceStarter: another EPP behind another interceptor
// with the same mutant (the data-parallel pool's EPP).
func (t *InterceptedTarget) NewInstance() harness.Target {
	return &InterceptedTarget{inner: t.inner.NewInstance().(*target.CommandTarget), mutant: t.mutant}
}
