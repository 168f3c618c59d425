package datalayer

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/eppkit/eppkit/reference/framework"
)

// header is the HELP/TYPE preamble vLLM (and the fake) print for the load gauges.
const header = `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
`

func set(names ...string) map[string]struct{} {
	out := map[string]struct{}{}
	for _, n := range names {
		out[n] = struct{}{}
	}
	return out
}

func parseText(t *testing.T, text string) *framework.Metrics {
	t.Helper()
	m, err := parseWith(DefaultMetricNames(), text)
	if err != nil {
		t.Fatalf("extract: %v\ninput:\n%s", err, text)
	}
	return m
}

func parseWith(names MetricNames, text string) (*framework.Metrics, error) {
	sp, err := names.compile()
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	return extract(fams, sp)
}

func TestExtract(t *testing.T) {
	tests := []struct {
		name string
		text string
		want framework.Metrics
	}{
		{
			name: "single engine vLLM v1 exposition",
			text: header + `vllm:num_requests_waiting{model_name="m"} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.7e9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048"} 1
`,
			want: framework.Metrics{WaitingQueueSize: 3, RunningRequests: 5, KVCacheUsage: 0.25,
				ActiveModels: set("a", "b"), WaitingModels: set("c"), MaxActiveModels: 4,
				CacheBlockSize: 16, CacheNumGPUBlocks: 2048},
		},
		{
			name: "optional families absent: no LoRA info, no cache config",
			text: header + `vllm:num_requests_waiting 0
vllm:num_requests_running 1
vllm:kv_cache_usage_perc 0
`,
			want: framework.Metrics{RunningRequests: 1},
		},
		{
			name: "latest LoRA series by value wins, even when its lists are empty",
			text: header + `vllm:num_requests_waiting 0
vllm:num_requests_running 0
vllm:kv_cache_usage_perc 0
vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters=""} 100
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 300
vllm:lora_requests_info{max_lora="2",running_lora_adapters="mid",waiting_lora_adapters="w"} 200
`,
			want: framework.Metrics{ActiveModels: set(), WaitingModels: set(), MaxActiveModels: 2},
		},
		{
			name: "adapter both running and waiting counts once, as running; blanks dropped",
			text: header + `vllm:num_requests_waiting 0
vllm:num_requests_running 0
vllm:kv_cache_usage_perc 0
vllm:lora_requests_info{max_lora="3",running_lora_adapters="a, b,,",waiting_lora_adapters="b,c"} 5
`,
			want: framework.Metrics{ActiveModels: set("a", "b"), WaitingModels: set("c"), MaxActiveModels: 3},
		},
		{
			name: "data-parallel engines: queue and running summed, KV averaged",
			text: header + `vllm:num_requests_waiting{engine="0",model_name="m"} 2
vllm:num_requests_waiting{engine="1",model_name="m"} 3
vllm:num_requests_running{engine="0",model_name="m"} 4
vllm:num_requests_running{engine="1",model_name="m"} 1
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
`,
			want: framework.Metrics{WaitingQueueSize: 5, RunningRequests: 5, KVCacheUsage: 0.4},
		},
		{
			name: "without engine labels the first series wins (upstream latest-timestamp rule)",
			text: header + `vllm:num_requests_waiting{model_name="a"} 7
vllm:num_requests_waiting{model_name="b"} 9
vllm:num_requests_running 0
vllm:kv_cache_usage_perc 0
`,
			want: framework.Metrics{WaitingQueueSize: 7},
		},
		{
			name: "explicit timestamps: the latest series wins",
			text: header + `vllm:num_requests_waiting{model_name="a"} 7 2000
vllm:num_requests_waiting{model_name="b"} 9 3000
vllm:num_requests_running 0
vllm:kv_cache_usage_perc 0
`,
			want: framework.Metrics{WaitingQueueSize: 9},
		},
		{
			name: "legacy vLLM (before v0.10): only vllm:gpu_cache_usage_perc",
			text: header + `vllm:num_requests_waiting{model_name="m"} 1
vllm:num_requests_running{model_name="m"} 2
vllm:gpu_cache_usage_perc{model_name="m"} 0.7
`,
			want: framework.Metrics{WaitingQueueSize: 1, RunningRequests: 2, KVCacheUsage: 0.7},
		},
		{
			name: "vLLM v0.9-v0.10: both names, the current one wins",
			text: header + `vllm:num_requests_waiting{engine="0",model_name="m"} 1
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.3
`,
			want: framework.Metrics{WaitingQueueSize: 1, RunningRequests: 2, KVCacheUsage: 0.3},
		},
		{
			name: "untyped samples (no TYPE line) and counters are read",
			text: `vllm:num_requests_waiting 1
# TYPE vllm:num_requests_running counter
vllm:num_requests_running 2
vllm:kv_cache_usage_perc 1.0000000002
`,
			want: framework.Metrics{WaitingQueueSize: 1, RunningRequests: 2, KVCacheUsage: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseText(t, tc.text)
			if diff := cmp.Diff(&tc.want, got, cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractSelectorLabels(t *testing.T) {
	names := DefaultMetricNames()
	names.WaitingRequests = `vllm:num_requests_waiting{model_name="b"}`
	m, err := parseWith(names, `vllm:num_requests_waiting{model_name="a"} 7
vllm:num_requests_waiting{model_name="b"} 9
vllm:num_requests_running 0
vllm:kv_cache_usage_perc 0
`)
	if err != nil {
		t.Fatal(err)
	}
	if m.WaitingQueueSize != 9 {
		t.Errorf("WaitingQueueSize = %d, want 9 (series model_name=b)", m.WaitingQueueSize)
	}
}

func TestExtractDisabledMetric(t *testing.T) {
	names := DefaultMetricNames()
	names.KVCacheUsage = ""
	m, err := parseWith(names, "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\n")
	if err != nil {
		t.Fatalf("a disabled metric must not be required: %v", err)
	}
	if m.WaitingQueueSize != 1 || m.RunningRequests != 2 {
		t.Errorf("got %+v", m)
	}
}

func TestExtractErrors(t *testing.T) {
	base := "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n"
	tests := []struct {
		name    string
		text    string
		wantErr string
		check   func(*framework.Metrics) bool // what must still have been read
	}{
		{"missing required family", "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\n",
			`"vllm:kv_cache_usage_perc" not found`,
			func(m *framework.Metrics) bool { return m.WaitingQueueSize == 1 && m.RunningRequests == 2 }},
		{"NaN queue", "vllm:num_requests_waiting NaN\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n",
			`"vllm:num_requests_waiting" has value NaN`,
			func(m *framework.Metrics) bool { return m.RunningRequests == 2 && m.KVCacheUsage == 0.5 }},
		{"negative KV", "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc -0.1\n",
			`"vllm:kv_cache_usage_perc" has value -0.1`, nil},
		{"histogram instead of gauge", "# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le=\"+Inf\"} 1\nvllm:num_requests_running_sum 1\nvllm:num_requests_running_count 1\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0\n",
			"is a histogram", nil},
		{"malformed max_lora", base + `vllm:lora_requests_info{max_lora="x",running_lora_adapters="a",waiting_lora_adapters=""} 1` + "\n",
			`max_lora="x" is not a non-negative integer`,
			func(m *framework.Metrics) bool { _, ok := m.ActiveModels["a"]; return ok }},
		{"malformed block_size", base + `vllm:cache_config_info{block_size="sixteen",num_gpu_blocks="10"} 1` + "\n",
			`block_size="sixteen"`,
			func(m *framework.Metrics) bool { return m.CacheNumGPUBlocks == 10 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseWith(DefaultMetricNames(), tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.check != nil && (m == nil || !tc.check(m)) {
				t.Errorf("the readable values were not kept: %+v", m)
			}
		})
	}
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    *metricSpec
		wantErr string
	}{
		{in: "", want: nil},
		{in: "vllm:num_requests_waiting", want: &metricSpec{name: "vllm:num_requests_waiting", labels: map[string]string{}}},
		{in: ` x{a=1, b="two"} `, want: &metricSpec{name: "x", labels: map[string]string{"a": "1", "b": "two"}}},
		{in: "{a=1}", wantErr: "no metric name"},
		{in: "x{a=1", wantErr: "must end"},
		{in: "x{}", wantErr: "empty label block"},
		{in: "x{a}", wantErr: `"a" is not label=value`},
		{in: "x{a=}", wantErr: "invalid value"},
		{in: "x{1a=b}", wantErr: "invalid label name"},
		{in: "x{a=1,a=2}", wantErr: "given twice"},
		{in: "x}", wantErr: "a character a name cannot have"},
	}
	for _, tc := range tests {
		got, err := parseSpec(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseSpec(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseSpec(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(metricSpec{})); diff != "" {
			t.Errorf("parseSpec(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"negative interval", Config{Interval: -1}, "Interval"},
		{"negative stale threshold", Config{StaleThreshold: -1}, "StaleThreshold"},
		{"negative timeout", Config{Timeout: -1}, "Timeout"},
		{"bad selector names its field", Config{Names: MetricNames{WaitingRequests: "x{a"}}, "Names.WaitingRequests"},
		{"bad engine label", Config{Names: MetricNames{WaitingRequests: "x", EngineLabel: "a-b"}}, "Names.EngineLabel"},
		{"relative path", Config{MetricsPath: "metrics"}, "MetricsPath"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error = %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.interval != DefaultInterval || c.stale != DefaultStaleThreshold || c.timeout != 500*1e6 {
		t.Errorf("defaults: interval %v stale %v timeout %v", c.interval, c.stale, c.timeout)
	}
	c, _ = New(Config{Interval: 200 * 1e6})
	if c.timeout != DefaultStaleThreshold {
		t.Errorf("timeout %v, want it capped at the stale threshold", c.timeout)
	}
}
