package legacyprefix

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/eppkit/eppkit/reference/framework"
)

// fakeHandle is a minimal framework.Handle for unit tests.
type fakeHandle struct {
	ctx   context.Context
	ps    *framework.PluginState
	clk   *clocktesting.FakeClock
	pool  []*framework.EndpointMetadata
	oneMu chan struct{}
}

func newFakeHandle(t testing.TB) *fakeHandle {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	return &fakeHandle{ctx: ctx, clk: clk, ps: framework.NewPluginState(clk, 0, 0), oneMu: make(chan struct{}, 1)}
}

func (h *fakeHandle) Context() context.Context                 { return h.ctx }
func (h *fakeHandle) PluginState() *framework.PluginState      { return h.ps }
func (h *fakeHandle) Plugin(string) (framework.Plugin, bool)   { return nil, false }
func (h *fakeHandle) Clock() clock.WithTicker                  { return h.clk }
func (h *fakeHandle) Seed() int64                              { return 1 }
func (h *fakeHandle) Logger() *slog.Logger                     { return slog.New(slog.DiscardHandler) }
func (h *fakeHandle) Endpoints() []*framework.EndpointMetadata { return h.pool }

func endpoint(name, ip string, m *framework.Metrics) *framework.Endpoint {
	return framework.NewEndpoint(&framework.EndpointMetadata{Namespace: "ns", Name: name, PodName: name, Address: ip, Port: 8000}, m)
}

func result(primary *framework.Endpoint, prefill *framework.Endpoint) *framework.SchedulingResult {
	r := &framework.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*framework.ProfileRunResult{
		"decode": {TargetEndpoints: []*framework.Endpoint{primary}},
	}}
	if prefill != nil {
		r.ProfileResults[PrefillProfile] = &framework.ProfileRunResult{TargetEndpoints: []*framework.Endpoint{prefill}}
	}
	return r
}

func TestParseConfig(t *testing.T) {
	def := DefaultConfig()
	tests := []struct {
		name    string
		params  string
		want    Config
		wantErr string
	}{
		{name: "absent", params: "", want: def},
		{name: "null", params: "null", want: def},
		{name: "all fields", params: `{"autoTune":false,"blockSizeTokens":8,"maxPrefixBlocksToMatch":10,"lruCapacityPerServer":50}`,
			want: Config{AutoTune: false, BlockSizeTokens: 8, MaxPrefixBlocksToMatch: 10, LRUCapacityPerServer: 50}},
		{name: "zeros take the defaults", params: `{"blockSizeTokens":0,"maxPrefixBlocksToMatch":0,"lruCapacityPerServer":0}`, want: def},
		{name: "blockSize with blockSizeTokens: tokens win", params: `{"blockSize":64,"blockSizeTokens":32}`,
			want: Config{AutoTune: true, BlockSize: 64, BlockSizeTokens: 32, MaxPrefixBlocksToMatch: 256, LRUCapacityPerServer: 31250}},
		{name: "blockSize alone is refused", params: `{"blockSize":64}`, wantErr: "blockSize"},
		{name: "unknown field", params: `{"blockSze":4}`, wantErr: `unknown field "blockSze"`},
		{name: "wrong type", params: `{"autoTune":"yes"}`, wantErr: "autoTune"},
		{name: "negative capacity", params: `{"lruCapacityPerServer":-1}`, wantErr: "lruCapacityPerServer"},
		{name: "negative max blocks", params: `{"maxPrefixBlocksToMatch":-3}`, wantErr: "maxPrefixBlocksToMatch"},
		{name: "negative block size", params: `{"blockSizeTokens":-16}`, wantErr: "blockSizeTokens"},
		{name: "trailing data", params: `{} {}`, wantErr: "trailing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig(json.RawMessage(tc.params))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	reg := framework.NewRegistry()
	Register(reg)
	f, ok := reg.Factory(PluginType)
	if !ok {
		t.Fatalf("type %q not registered", PluginType)
	}
	p, err := f("legacy", json.RawMessage(`{"autoTune":false}`), newFakeHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.TypedName(); got != (framework.TypedName{Type: PluginType, Name: "legacy"}) {
		t.Fatalf("TypedName = %+v", got)
	}
	if _, err := f("x", json.RawMessage(`{"bogus":1}`), newFakeHandle(t)); err == nil {
		t.Fatal("a bad parameter must fail the factory")
	}
}

// TestScoreAndPreRequest walks a request sequence and checks scores, state and index after each.
func TestScoreAndPreRequest(t *testing.T) {
	a := endpoint("pod-a", "10.0.0.1", nil)
	b := endpoint("pod-b", "10.0.0.2", nil)
	c := endpoint("pod-c", "10.0.0.3", nil)
	all := []*framework.Endpoint{a, b, c}
	sys := strings.Repeat("S", 64*4) // 4 blocks of 16 tokens
	type step struct {
		req        *framework.LLMRequest
		candidates []*framework.Endpoint
		pick       *framework.Endpoint
		prefill    *framework.Endpoint
		want       map[string]float64
	}
	steps := []step{
		{req: completions("m", sys, ""), candidates: all, pick: a,
			want: map[string]float64{a.Key(): 0, b.Key(): 0, c.Key(): 0}},
		{req: completions("m", sys+strings.Repeat("x", 128), ""), candidates: all, pick: b,
			want: map[string]float64{a.Key(): 4.0 / 6, b.Key(): 0, c.Key(): 0}},
		// Only b and c are candidates (a filter dropped a): a's blocks still count for the walk.
		{req: completions("m", sys+strings.Repeat("x", 128), ""), candidates: []*framework.Endpoint{b, c}, pick: c, prefill: a,
			want: map[string]float64{b.Key(): 1, c.Key(): 0}},
		{req: completions("m", sys+strings.Repeat("x", 128), ""), candidates: all, pick: a,
			want: map[string]float64{a.Key(): 1, b.Key(): 1, c.Key(): 1}},
		{req: completions("other-model", sys, ""), candidates: all, pick: a,
			want: map[string]float64{a.Key(): 0, b.Key(): 0, c.Key(): 0}},
		{req: completions("m", "short", ""), candidates: all, pick: c,
			want: map[string]float64{a.Key(): 0, b.Key(): 0, c.Key(): 0}},
	}
	h := newFakeHandle(t)
	p := New("legacy", Config{AutoTune: false, BlockSizeTokens: 16, MaxPrefixBlocksToMatch: 256, LRUCapacityPerServer: 100}, h)
	for i, s := range steps {
		s.req.RequestID = "req-" + string(rune('a'+i))
		cycle := framework.NewCycleState()
		got := p.Score(context.Background(), cycle, s.req, s.candidates)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Fatalf("step %d scores (-want +got):\n%s", i, diff)
		}
		v, ok := cycle.Read(p.StateKey())
		if !ok {
			t.Fatalf("step %d: no cycle state under %q", i, p.StateKey())
		}
		st := v.(*State)
		if _, ok := h.ps.Read(s.req.RequestID, p.StateKey()); !ok {
			t.Fatalf("step %d: Score wrote no plugin state", i)
		}
		p.PreRequest(context.Background(), s.req, result(s.pick, s.prefill))
		if _, ok := h.ps.Read(s.req.RequestID, p.StateKey()); ok {
			t.Fatalf("step %d: PreRequest left its plugin state behind", i)
		}
		contents := p.IndexContents()
		for _, ep := range []*framework.Endpoint{s.pick, s.prefill} {
			if ep == nil {
				continue
			}
			held := map[uint64]bool{}
			for _, x := range contents[ep.Key()] {
				held[x] = true
			}
			for _, x := range st.Hashes {
				if !held[x] {
					t.Fatalf("step %d: %s does not hold hash %d after PreRequest", i, ep.Key(), x)
				}
			}
		}
	}
	if h.ps.Len() != 0 {
		t.Fatalf("plugin state still holds %d requests", h.ps.Len())
	}
}

func TestAutoTune(t *testing.T) {
	prompt := strings.Repeat("p", 256)
	tests := []struct {
		name          string
		candidates    []*framework.Endpoint
		wantBlockToks int
		wantCapacity  int // capacity given to the picked (first) candidate
	}{
		{
			name: "first by name that reports a block size",
			candidates: []*framework.Endpoint{
				endpoint("pod-z", "10.0.0.9", &framework.Metrics{CacheBlockSize: 32, CacheNumGPUBlocks: 3}),
				endpoint("pod-b", "10.0.0.2", &framework.Metrics{CacheBlockSize: 8}),
				endpoint("pod-a", "10.0.0.1", &framework.Metrics{}),
			},
			wantBlockToks: 8, wantCapacity: 3,
		},
		{
			name:          "nobody reports: configured values",
			candidates:    []*framework.Endpoint{endpoint("pod-a", "10.0.0.1", nil)},
			wantBlockToks: 16, wantCapacity: 7,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHandle(t)
			p := New("", Config{AutoTune: true, BlockSizeTokens: 16, MaxPrefixBlocksToMatch: 256, LRUCapacityPerServer: 7}, h)
			req := completions("m", prompt, "")
			cycle := framework.NewCycleState()
			p.Score(context.Background(), cycle, req, tc.candidates)
			v, _ := cycle.Read(p.StateKey())
			st := v.(*State)
			if st.BlockSizeTokens != tc.wantBlockToks {
				t.Fatalf("block size = %d tokens, want %d", st.BlockSizeTokens, tc.wantBlockToks)
			}
			if want := len(prompt) / (tc.wantBlockToks * 4); len(st.Hashes) != want {
				t.Fatalf("%d hashes, want %d", len(st.Hashes), want)
			}
			pick := tc.candidates[0]
			p.PreRequest(context.Background(), req, result(pick, nil))
			if got := len(p.IndexContents()[pick.Key()]); got != min(tc.wantCapacity, len(st.Hashes)) {
				t.Fatalf("picked endpoint holds %d hashes, want min(capacity %d, %d)", got, tc.wantCapacity, len(st.Hashes))
			}
		})
	}
}

func TestPreRequestEdgeCases(t *testing.T) {
	a := endpoint("pod-a", "10.0.0.1", nil)
	req := completions("m", strings.Repeat("q", 128), "")
	tests := []struct {
		name   string
		score  bool
		result *framework.SchedulingResult
		want   map[string][]uint64
	}{
		{name: "no Score, nothing indexed", score: false, result: result(a, nil), want: map[string][]uint64{}},
		{name: "nil result", score: true, result: nil, want: map[string][]uint64{}},
		{name: "primary without targets", score: true,
			result: &framework.SchedulingResult{PrimaryProfileName: "d", ProfileResults: map[string]*framework.ProfileRunResult{"d": {}}},
			want:   map[string][]uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHandle(t)
			p := New("", Config{BlockSizeTokens: 16, MaxPrefixBlocksToMatch: 256, LRUCapacityPerServer: 10}, h)
			if tc.score {
				p.Score(context.Background(), framework.NewCycleState(), req, []*framework.Endpoint{a})
			}
			p.PreRequest(context.Background(), req, tc.result)
			if diff := cmp.Diff(tc.want, p.IndexContents()); diff != "" {
				t.Fatalf("index (-want +got):\n%s", diff)
			}
			if h.ps.Len() != 0 {
				t.Fatalf("plugin state not deleted")
			}
		})
	}
}

func TestPurgeDeparted(t *testing.T) {
	h := newFakeHandle(t)
	a := endpoint("pod-a", "10.0.0.1", nil)
	b := endpoint("pod-b", "10.0.0.2", nil)
	h.pool = []*framework.EndpointMetadata{a.Metadata, b.Metadata}
	pl, err := Factory("legacy", json.RawMessage(`{"autoTune":false}`), h)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*Plugin)
	for i, ep := range []*framework.Endpoint{a, b} {
		req := completions("m", strings.Repeat(string(rune('k'+i)), 128), "")
		req.RequestID = ep.Key()
		p.Score(context.Background(), framework.NewCycleState(), req, []*framework.Endpoint{a, b})
		p.PreRequest(context.Background(), req, result(ep, nil))
	}
	if diff := cmp.Diff([]string{a.Key(), b.Key()}, p.IndexedEndpoints()); diff != "" {
		t.Fatalf("indexed endpoints (-want +got):\n%s", diff)
	}
	// b leaves the pool; the periodic sweep on the handle's clock purges it.
	h.pool = []*framework.EndpointMetadata{a.Metadata}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.clk.Step(PurgeInterval)
		if len(p.IndexedEndpoints()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b was not purged; index holds %v", p.IndexedEndpoints())
		}
		time.Sleep(time.Millisecond)
	}
	if diff := cmp.Diff([]string{a.Key()}, p.IndexedEndpoints()); diff != "" {
		t.Fatalf("after purge (-want +got):\n%s", diff)
	}
	p.RemoveEndpoint(a.Key())
	if n := p.IndexSize(); n != 0 {
		t.Fatalf("index size %d after removing every endpoint", n)
	}
}
