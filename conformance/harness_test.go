package conformance

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
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
		target, err := NewCommandTarget("command", tc.command)
		if err != nil {
			t.Fatal(err)
		}
		to := DefaultTimeoutConfig()
		to.TargetReady = Duration(time.Second)
		start := time.Now()
		s, err := StartHarness(t.Context(), HarnessConfig{Target: target, Source: StaticSource{}, LogDir: t.TempDir(),
			Timeouts: to, Seed: 1, FleetSize: 2})
		var he *HarnessError
		if s != nil || !errors.As(err, &he) || he.Stage != "readiness" {
			t.Fatalf("%s: StartHarness = %v, %v; want a readiness HarnessError", tc.command, s, err)
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
		case <-target.Exited(): // Close stopped it
		case <-time.After(5 * time.Second):
			t.Error("the target still runs after a failed start")
		}
	}
}

func TestPinMetrics(t *testing.T) {
	base := vllm.DefaultConfig()
	base.Model = "m"
	f, err := fleet.Start(fleet.Options{Count: 2, Base: base, DistinctPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &Suite{Fleet: f, Timeouts: DefaultTimeoutConfig()}
	addr := s.Endpoints()[1]
	pinned := func() *vllm.FakeMetrics { return pinnedMetrics(t, addr) }
	rt := &runT{name: "PinMetricsProbe"}
	s.PinMetrics(rt, addr, vllm.FakeMetrics{WaitingRequests: 25, KVCacheUsage: 0.97})
	if got := pinned(); got == nil || got.WaitingRequests != 25 || got.KVCacheUsage != 0.97 {
		t.Fatalf("pinned = %+v", got)
	}
	rt.runCleanups()
	if got := pinned(); got != nil || rt.Failed() {
		t.Fatalf("after cleanup pinned = %+v, failed=%v (%s)", got, rt.Failed(), rt.log.String())
	}
	// An address outside the fleet fails the test (Fatalf ends the goroutine).
	rt2 := &runT{name: "Outside"}
	done := make(chan struct{})
	go func() { defer close(done); s.PinMetrics(rt2, "10.9.9.9:1", vllm.FakeMetrics{}) }()
	<-done
	if !rt2.Failed() || !strings.Contains(rt2.firstFailure, "no fleet member at 10.9.9.9:1") {
		t.Fatalf("outside address: failed=%v %q", rt2.Failed(), rt2.firstFailure)
	}
}

func TestSumCounter(t *testing.T) {
	text := `# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 3
vllm:request_success_total{finished_reason="length",model_name="m"} 4
vllm:request_success_total_other 100
vllm:request_success_total 2
`
	got, err := sumCounter(text, "vllm:request_success_total")
	if err != nil || got != 9 {
		t.Fatalf("sumCounter = %v, %v; want 9, nil", got, err)
	}
	if _, err := sumCounter("vllm:request_success_total{a=\"b\"} x\n", "vllm:request_success_total"); err == nil {
		t.Fatal("sumCounter accepted a malformed value")
	}
}

// externalFakes is an ExternalFleet over a fake fleet whose unpin value is the simulator's
// baseline (zeros), as internal/simfleet's is.
type externalFakes struct{ f *fleet.Fleet }

func (e externalFakes) Members() []ExternalMember {
	var out []ExternalMember
	for _, m := range e.f.Members() {
		out = append(out, ExternalMember{Name: "ext-" + m.Name, Addr: m.Addr()})
	}
	return out
}
func (e externalFakes) DistinctIPs() bool { return false }
func (e externalFakes) UnpinMetrics() any {
	return map[string]any{"running-requests": 0, "waiting-requests": 0, "kv-cache-usage": 0, "loras": []any{}}
}
func (e externalFakes) Close() { e.f.Close() }

func TestExternalFleetPinAndUnpin(t *testing.T) {
	base := vllm.DefaultConfig()
	base.Model = "m"
	f, err := fleet.Start(fleet.Options{Count: 2, Base: base, DistinctPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &Suite{External: externalFakes{f}, Timeouts: DefaultTimeoutConfig()}
	defer s.Close()
	if got, want := s.Endpoints(), []string{f.Member(0).Addr(), f.Member(1).Addr()}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Endpoints = %v, want %v", got, want)
	}
	if a, ok := s.PodAddr("ext-" + f.Member(1).Name); !ok || a != f.Member(1).Addr() {
		t.Fatalf("PodAddr = %q, %v", a, ok)
	}
	if _, ok := s.PodAddr(f.Member(1).Name); ok {
		t.Fatal("PodAddr found a name the external fleet does not use")
	}
	if s.DistinctIPs() {
		t.Fatal("DistinctIPs = true, want the external fleet's false")
	}
	addr := s.Endpoints()[0]
	rt := &runT{name: "ExternalPin"}
	s.PinMetrics(rt, addr, vllm.FakeMetrics{WaitingRequests: 25})
	rt.runCleanups()
	// The unpin posted the external fleet's baseline, not null: the fake now holds zeros pinned.
	if fm := pinnedMetrics(t, addr); rt.Failed() || fm == nil || fm.WaitingRequests != 0 {
		t.Fatalf("after cleanup: failed=%v (%s), fake-metrics %+v; want the baseline pinned", rt.Failed(), rt.log.String(), fm)
	}
}

// pinnedMetrics reads the fake vLLM at addr's pinned metrics from its /admin/config (nil when
// none are pinned).
func pinnedMetrics(t *testing.T, addr string) *vllm.FakeMetrics {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/admin/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ac vllm.AdminConfig
	if err := json.NewDecoder(resp.Body).Decode(&ac); err != nil {
		t.Fatal(err)
	}
	return ac.FakeMetrics
}
