package vllm

import (
	"bytes"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func parsePage(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parsing a metrics page: %v", err)
	}
	return fams
}

func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return parsePage(t, b)
}

// familyShape is what must match a real vLLM page: type, documentation, the label names of
// every series, and a histogram's bucket bounds.
type familyShape struct {
	Type    string
	Help    string
	Labels  []string
	Buckets []float64
}

func shapes(fams map[string]*dto.MetricFamily) map[string]familyShape {
	out := map[string]familyShape{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "vllm:") {
			continue
		}
		s := familyShape{Type: f.GetType().String(), Help: f.GetHelp()}
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
			if h := m.GetHistogram(); h != nil && s.Buckets == nil {
				for _, b := range h.GetBucket() {
					s.Buckets = append(s.Buckets, b.GetUpperBound())
				}
			}
		}
		s.Labels = slices.Sorted(maps.Keys(labels))
		out[name] = s
	}
	return out
}

// TestMetricFamiliesMatchVLLMPages compares, family by family, what the fake exports in each
// metric-name generation with a vLLM /metrics page written down from vLLM's source
// (testdata/metrics/*.prom, each citing its source): the same vllm:* families, each with vLLM's
// type, documentation, label names and buckets.
func TestMetricFamiliesMatchVLLMPages(t *testing.T) {
	for _, tc := range []struct {
		generation string
		fixtures   []string
	}{
		{MetricsCurrent, []string{"vllm-current.prom"}},
		{MetricsLegacy, []string{"vllm-legacy.prom"}},
		{MetricsBoth, []string{"vllm-current.prom", "vllm-both-deprecated.prom"}},
	} {
		t.Run(tc.generation, func(t *testing.T) {
			want := map[string]familyShape{}
			for _, f := range tc.fixtures {
				b, err := os.ReadFile(filepath.Join("testdata", "metrics", f))
				if err != nil {
					t.Fatal(err)
				}
				maps.Copy(want, shapes(parsePage(t, b)))
			}
			inst := startTest(t, func(c *Config) {
				c.MetricsNames = tc.generation
				c.EnableLoRA = true
				c.EnableKVCache = true
			})
			if resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"a b c","max_tokens":3}`); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := shapes(scrapeFamilies(t, inst.URL()))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("families of generation %s (-vLLM page +fake):\n%s", tc.generation, diff)
			}
		})
	}
}

// TestLoRAInfoOnlyWithLoRA: vLLM registers vllm:lora_requests_info only with a LoRA config, so a
// server without LoRA has no such family (an EPP that requires it fails against real vLLM,
// llm-d-router #926); with --enable-lora, --max-loras or adapters it is there.
func TestLoRAInfoOnlyWithLoRA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   bool
	}{
		{"default: LoRA off", nil, false},
		{"--enable-lora", func(c *Config) { c.EnableLoRA = true }, true},
		{"--max-loras 2", func(c *Config) { c.MaxLoras = 2 }, true},
		{"--lora-modules", func(c *Config) { c.LoraModules = []LoraModule{{Name: "a"}}; c.MaxCPULoras = 2 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := startTest(t, tc.mutate)
			_, has := scrapeFamilies(t, inst.URL())[MetricLoraInfo]
			if has != tc.want {
				t.Errorf("%s present = %v, want %v", MetricLoraInfo, has, tc.want)
			}
			resp, b := post(t, inst.URL()+"/v1/load_lora_adapter", `{"lora_name":"dyn","lora_path":"/x"}`)
			if wantStatus := map[bool]int{true: 200, false: 400}[tc.want]; resp.StatusCode != wantStatus {
				t.Errorf("load_lora_adapter: status %d (%s), want %d", resp.StatusCode, b, wantStatus)
			}
		})
	}
	// Pinned LoRA series are exported whatever the config: the pin asks for them.
	inst := startTest(t, func(c *Config) { c.FakeMetrics = &FakeMetrics{Loras: []LoraMetrics{{Running: "x", Timestamp: 5}}} })
	if _, has := scrapeFamilies(t, inst.URL())[MetricLoraInfo]; !has {
		t.Error("pinned LoRA series not exported")
	}
}

// TestMetricGenerationsKVNames: exactly the generation's KV-cache gauge carries the engine's use.
func TestMetricGenerationsKVNames(t *testing.T) {
	for gen, want := range map[string][]string{
		MetricsCurrent: {MetricKVCacheUsage},
		MetricsLegacy:  {MetricGPUCacheUsage},
		MetricsBoth:    {MetricGPUCacheUsage, MetricKVCacheUsage},
	} {
		inst := startTest(t, func(c *Config) {
			c.MetricsNames = gen
			c.FakeMetrics = &FakeMetrics{KVCacheUsage: 0.75}
		})
		fams := scrapeFamilies(t, inst.URL())
		var got []string
		for _, name := range []string{MetricGPUCacheUsage, MetricKVCacheUsage} {
			if f, ok := fams[name]; ok {
				got = append(got, name)
				if v := f.GetMetric()[0].GetGauge().GetValue(); v != 0.75 {
					t.Errorf("%s: %s = %v, want the pinned 0.75", gen, name, v)
				}
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: KV families (-want +got):\n%s", gen, diff)
		}
	}
}

// TestDataParallelInternal: one API server in front of N engines, as vLLM's internal load
// balancing: every per-engine family has one series per engine="0".."N-1", requests spread over
// the engines by load, and the rank-ports mode keeps one server per rank with its rank as the
// engine label.
func TestDataParallelInternal(t *testing.T) {
	inst := startTest(t, func(c *Config) {
		c.DPSize = 3
		c.DataParallelMode = DataParallelInternal
		c.InterTokenLatency = Duration(50 * 1e6) // 50ms: requests overlap
	})
	if len(inst.Ranks) != 1 {
		t.Fatalf("internal mode started %d servers, want 1", len(inst.Ranks))
	}
	done := make(chan struct{})
	for range 6 {
		go func() {
			defer func() { done <- struct{}{} }()
			post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"spread me","max_tokens":4}`)
		}()
	}
	for range 6 {
		<-done
	}
	fams := scrapeFamilies(t, inst.URL())
	for _, name := range []string{MetricRunning, MetricWaiting, MetricKVCacheUsage, MetricPromptTokens, MetricCacheConfig} {
		var engines []string
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					engines = append(engines, l.GetValue())
				}
			}
		}
		slices.Sort(engines)
		if diff := cmp.Diff([]string{"0", "1", "2"}, engines); diff != "" {
			t.Errorf("%s engine series (-want +got):\n%s", name, diff)
		}
	}
	served := 0
	for _, m := range fams[MetricPromptTokens].GetMetric() {
		if m.GetCounter().GetValue() > 0 {
			served++
		}
	}
	if served < 2 {
		t.Errorf("6 overlapping requests reached %d of 3 engines; the load balancer should spread them", served)
	}

	ports := startTest(t, func(c *Config) { c.DPSize = 2 })
	if len(ports.Ranks) != 2 {
		t.Fatalf("ports mode started %d servers, want 2", len(ports.Ranks))
	}
	for i, r := range ports.Ranks {
		m := scrapeFamilies(t, r.URL())[MetricRunning].GetMetric()
		if len(m) != 1 {
			t.Fatalf("rank %d: %d running series", i, len(m))
		}
		for _, l := range m[0].GetLabel() {
			if l.GetName() == "engine" && l.GetValue() != string(rune('0'+i)) {
				t.Errorf("rank %d labelled engine=%q", i, l.GetValue())
			}
		}
	}
}

// TestEnginePins: fake-metrics "engines" pins each data-parallel engine's gauges on its own
// engine-labelled series (engines past the list keep the top-level values), and a bad engine
// entry is refused naming it.
func TestEnginePins(t *testing.T) {
	inst := startTest(t, func(c *Config) {
		c.DPSize = 3
		c.DataParallelMode = DataParallelInternal
	})
	pin := `{"fake-metrics":{"running-requests":1,"waiting-requests":0,"kv-cache-usage":0.1,` +
		`"engines":[{"running-requests":2,"waiting-requests":0,"kv-cache-usage":0.2},{"running-requests":3,"waiting-requests":25,"kv-cache-usage":0.9}]}}`
	if resp, body := post(t, inst.URL()+"/admin/config", pin); resp.StatusCode != 200 {
		t.Fatalf("pin engines: %d %s", resp.StatusCode, body)
	}
	fams := scrapeFamilies(t, inst.URL())
	want := map[string]map[string]float64{
		MetricRunning:      {"0": 2, "1": 3, "2": 1},
		MetricWaiting:      {"0": 0, "1": 25, "2": 0},
		MetricKVCacheUsage: {"0": 0.2, "1": 0.9, "2": 0.1},
	}
	for name, w := range want {
		got := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s per engine (-want +got):\n%s", name, diff)
		}
	}
	bad := `{"fake-metrics":{"engines":[{"kv-cache-usage":0.1},{"waiting-requests":-1}]}}`
	if resp, body := post(t, inst.URL()+"/admin/config", bad); resp.StatusCode != 400 || !strings.Contains(string(body), "engines[1]") {
		t.Errorf("negative engine queue: %d %s, want 400 naming engines[1]", resp.StatusCode, body)
	}
	unknown := `{"fake-metrics":{"engines":[{"queue":1}]}}`
	if resp, body := post(t, inst.URL()+"/admin/config", unknown); resp.StatusCode != 400 || !strings.Contains(string(body), "queue") {
		t.Errorf("unknown engine key: %d %s, want 400 naming it", resp.StatusCode, body)
	}
}
