package harness_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance/endpointsource"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
)

// A command target that never gets ready fails after targetReady with the end of its log; when
// its template has no {{.HealthPort}} the error says so (the EPP may serve health on a port of
// its own that eppkit does not probe), and only then.
func TestStartHarnessTargetNeverReady(t *testing.T) {
	for _, tc := range []struct {
		command string
		hint    bool
	}{
		{`echo listening nowhere; sleep 30`, true},
		{`echo listening nowhere, not even on {{.HealthPort}}; sleep 30`, false},
	} {
		tgt, err := target.NewCommandTarget("command", tc.command)
		if err != nil {
			t.Fatal(err)
		}
		to := harness.DefaultTimeoutConfig()
		to.TargetReady = harness.Duration(time.Second)
		start := time.Now()
		s, err := harness.Start(t.Context(), harness.Config{Target: tgt, Source: endpointsource.StaticSource{}, LogDir: t.TempDir(),
			Timeouts: to, Seed: 1, FleetSize: 2})
		var he *harness.Error
		if s != nil || !errors.As(err, &he) || he.Stage != "readiness" {
			t.Fatalf("%s: harness.Start = %v, %v; want a readiness Error", tc.command, s, err)
		}
		for _, want := range []string{"not ready within 1s", "gRPC health SERVING", "listening nowhere"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error lacks %q: %v", tc.command, want, err)
			}
		}
		if got := strings.Contains(err.Error(), "has no {{.HealthPort}}"); got != tc.hint {
			t.Errorf("%s: {{.HealthPort}} hint %v, want %v: %v", tc.command, got, tc.hint, err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("gave up after %s", d)
		}
		select {
		case <-tgt.Exited(): // Close stopped it
		case <-time.After(5 * time.Second):
			t.Error("the target still runs after a failed start")
		}
	}
}
