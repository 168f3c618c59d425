package harness

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/internal/promscrape"
)

func TestPinMetrics(t *testing.T) {
	base := vllm.DefaultConfig()
	base.Model = "m"
	f, err := fleet.Start(fleet.Options{Count: 2, Base: base, DistinctPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &Suite{Fleet: f, Timeouts: DefaultTimeoutConfig()}
	s.Timeouts.MetricsPropagation = Duration(300 * time.Millisecond)
	addr := s.Endpoints()[1]
	pinned := func() *vllm.FakeMetrics { return pinnedMetrics(t, addr) }
	rt := NewRecorder("PinMetricsProbe")
	s.PinMetrics(rt, addr, vllm.FakeMetrics{WaitingRequests: 25, KVCacheUsage: 0.97})
	if got := pinned(); got == nil || got.WaitingRequests != 25 || got.KVCacheUsage != 0.97 {
		t.Fatalf("pinned = %+v", got)
	}
	// Nothing scrapes this fake: the cleanup unpins, waits MetricsPropagation for the EPP's
	// scrapes and says so in the log, without failing the test.
	rt.RunCleanups()
	if got := pinned(); got != nil || rt.Failed() {
		t.Fatalf("after cleanup pinned = %+v, failed=%v (%s)", got, rt.Failed(), rt.Record().Log)
	}
	if log := rt.Record().Log; !strings.Contains(log, "after unpinning "+addr+": 0 of 2 /metrics scrapes within 300ms") {
		t.Fatalf("cleanup log without a scraper: %q", log)
	}

	// With a scraper (the EPP) the cleanup returns once two pages were written after the unpin.
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
				resp.Body.Close()
			}
		}
	}()
	rt3 := NewRecorder("PinMetricsScraped")
	s.PinMetrics(rt3, addr, vllm.FakeMetrics{WaitingRequests: 3})
	before, err := s.metricsScrapes(addr)
	if err != nil {
		t.Fatal(err)
	}
	rt3.RunCleanups()
	after, err := s.metricsScrapes(addr)
	close(stop)
	<-scraped
	if err != nil || after < before+2 || rt3.Failed() || rt3.Record().Log != "" {
		t.Fatalf("scraped cleanup: scrapes %d→%d (%v), failed=%v, log %q", before, after, err, rt3.Failed(), rt3.Record().Log)
	}
	// An address outside the fleet fails the test (Fatalf ends the goroutine).
	rt2 := NewRecorder("Outside")
	done := make(chan struct{})
	go func() { defer close(done); s.PinMetrics(rt2, "10.9.9.9:1", vllm.FakeMetrics{}) }()
	<-done
	if !rt2.Failed() || !strings.Contains(rt2.Record().FirstFailure, "no fleet member at 10.9.9.9:1") {
		t.Fatalf("outside address: failed=%v %q", rt2.Failed(), rt2.Record().FirstFailure)
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
	// RankSuccesses' reading: the counter summed over its series, not another family that
	// shares its prefix.
	fams, err := promscrape.Parse(strings.NewReader(text))
	if got := fams.Sum("vllm:request_success_total"); err != nil || got != 9 {
		t.Fatalf("sum = %v, %v; want 9, nil", got, err)
	}
	if _, err := promscrape.Parse(strings.NewReader("vllm:request_success_total{a=\"b\"} x\n")); err == nil {
		t.Fatal("a malformed value was accepted")
	}
}

// externalFakes is an ExternalFleet over a fake fleet whose unpin value is the simulator's
// baseline (zeros), as conformance/simfleet's is.
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
	rt := NewRecorder("ExternalPin")
	s.PinMetrics(rt, addr, vllm.FakeMetrics{WaitingRequests: 25})
	rt.RunCleanups()
	// The unpin posted the external fleet's baseline, not null: the fake now holds zeros pinned.
	if fm := pinnedMetrics(t, addr); rt.Failed() || fm == nil || fm.WaitingRequests != 0 {
		t.Fatalf("after cleanup: failed=%v (%s), fake-metrics %+v; want the baseline pinned", rt.Failed(), rt.Record().Log, fm)
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

// deadTarget is a target process that has exited, with a log.
type deadTarget struct{ exited chan struct{} }

func (deadTarget) Name() string                                          { return "command" }
func (deadTarget) Start(context.Context, TargetEnv) (TargetAddrs, error) { return TargetAddrs{}, nil }
func (d deadTarget) Exited() <-chan struct{}                             { return d.exited }
func (deadTarget) ExitErr() error                                        { return errors.New("exit status 4") }
func (deadTarget) Stop(time.Duration) error                              { return nil }
func (deadTarget) LogTail(int) string                                    { return "dying words" }
func (deadTarget) LogPath() string                                       { return "target.log" }

// TestSuiteTargetExited: once the target process exited, TargetExited says so with the exit
// reason and the end of its log (the runner fails every remaining test with it); while it runs,
// and with no target, it is nil.
func TestSuiteTargetExited(t *testing.T) {
	d := deadTarget{exited: make(chan struct{})}
	s := &Suite{Timeouts: DefaultTimeoutConfig(), target: d, targetStarted: true}
	if err := s.TargetExited(); err != nil {
		t.Fatalf("running target: %v", err)
	}
	close(d.exited)
	err := s.TargetExited()
	if err == nil || !strings.Contains(err.Error(), "exited during the run") || !strings.Contains(err.Error(), "exit status 4") ||
		!strings.Contains(err.Error(), "dying words") {
		t.Fatalf("exited target: %v", err)
	}
	var none *Suite
	if err := none.TargetExited(); err != nil {
		t.Fatalf("nil Suite: %v", err)
	}
}

// TestSuiteTargetDown: a target whose ext_proc address accepts connections is up; once nothing
// listens there for TargetRefused it is down, with the address in the diagnosis; a cancelled
// context (an interrupted run) is never reported as a dead target.
func TestSuiteTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	timeouts := DefaultTimeoutConfig()
	timeouts.TargetRefused, timeouts.Poll = Duration(300*time.Millisecond), Duration(50*time.Millisecond)
	s := &Suite{TargetAddress: ln.Addr().String(), Timeouts: timeouts}
	if err := s.TargetDown(context.Background()); err != nil {
		t.Fatalf("listening target: %v", err)
	}
	_ = ln.Close()
	err = s.TargetDown(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the target stopped answering") || !strings.Contains(err.Error(), s.TargetAddress) {
		t.Fatalf("closed target: %v, want a diagnosis naming %s", err, s.TargetAddress)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.TargetDown(ctx); err != nil {
		t.Fatalf("cancelled run: %v, want nil", err)
	}
}
