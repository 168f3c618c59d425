// Package wiring registers eppkit's own conformance tests, targets and endpoint sources with the
// conformance library, so that every program that runs the suite sees the same ones: the
// registry of conformance/tests, the "reference" target (this repository's reference EPP,
// `eppkit reference-epp`, run from Options.Eppkit) and the "cluster" target and endpoint source
// (conformance/cluster/clustertarget). cmd/eppkit and every suite import it for its side effects:
//
//	import _ "github.com/eppkit/eppkit/conformance/wiring"
//
// An implementer's own `go test` does not need it: conformance registers the command and
// address targets and the static and apiserver endpoint sources itself, and the tests come from
// a blank import of conformance/tests.
package wiring

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
	_ "github.com/eppkit/eppkit/conformance/tests" // registers the tests
	"github.com/eppkit/eppkit/manifests"
)

func init() {
	conformance.RegisterTarget("reference", func(conformance.TargetOptions) (harness.Target, error) {
		t, err := target.NewCommandTarget("reference", target.ReferenceCommand)
		if err != nil {
			return nil, err
		}
		return &referenceTarget{CommandTarget: t}, nil
	})
}

// referenceTarget is the reference EPP run from the eppkit binary. Without a config file it
// gets manifests/epp-configs/conformance.yaml (embedded): the reference passes every test only
// with the config that claims every feature.
type referenceTarget struct {
	*target.CommandTarget
	tempConfig string // the embedded config written for this run, removed by Stop
}

// Start implements harness.Target.
func (r *referenceTarget) Start(ctx context.Context, env harness.TargetEnv) (harness.TargetAddrs, error) {
	if env.ConfigFile == "" {
		path, err := writeTempConfig(manifests.ConformanceEPPConfig())
		if err != nil {
			return harness.TargetAddrs{}, err
		}
		r.tempConfig, env.ConfigFile = path, path
	}
	return r.CommandTarget.Start(ctx, env)
}

// LeaderElectionArgs implements harness.LeaderElectionArgsProvider: the reference's flag.
func (r *referenceTarget) LeaderElectionArgs() string { return "--ha-enable-leader-election" }

// Stop implements harness.Target.
func (r *referenceTarget) Stop(timeout time.Duration) error {
	err := r.CommandTarget.Stop(timeout)
	if r.tempConfig != "" {
		_ = os.Remove(r.tempConfig)
	}
	return err
}

// NewInstance implements harness.InstanceStarter.
func (r *referenceTarget) NewInstance() harness.Target {
	return &referenceTarget{CommandTarget: r.CommandTarget.NewInstance().(*target.CommandTarget)}
}

// writeTempConfig writes an EndpointPickerConfig to a new temporary file and returns its path.
func writeTempConfig(b []byte) (string, error) {
	f, err := os.CreateTemp("", "eppkit-reference-config-*.yaml")
	if err != nil {
		return "", fmt.Errorf("write the reference's config: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write the reference's config: %w", err)
	}
	return f.Name(), f.Close()
}
