package vllm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "10ms", want: 10 * time.Millisecond},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "250us", want: 250 * time.Microsecond},
		{in: "0", want: 0},
		{in: "30", want: 30 * time.Millisecond}, // bare integers are ms (older simulator releases)
		{in: "abc", wantErr: true},
		{in: "", wantErr: true},
		{in: "99999999999999999", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseDuration(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseDuration(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if err == nil && got.D() != tc.want {
				t.Fatalf("ParseDuration(%q) = %v, want %v", tc.in, got.D(), tc.want)
			}
		})
	}
}

func TestNormalizeArgs(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{name: "space-separated lora modules",
			in:   []string{"--model", "m", "--lora-modules", `{"name":"a"}`, `{"name":"b"}`, "--port", "1"},
			want: []string{"--model", "m", `--lora-modules={"name":"a"}`, `--lora-modules={"name":"b"}`, "--port", "1"}},
		{name: "equals form is kept", in: []string{"--failure-types=rate_limit"}, want: []string{"--failure-types=rate_limit"}},
		{name: "empty list clears", in: []string{"--served-model-name", "--port", "1"}, want: []string{"--served-model-name=", "--port", "1"}},
		{name: "at the end", in: []string{"--failure-types", "reset", "abort"}, want: []string{"--failure-types=reset", "--failure-types=abort"}},
		{name: "other flags untouched", in: []string{"--mode", "echo"}, want: []string{"--mode", "echo"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, NormalizeArgs(tc.in)); diff != "" {
				t.Errorf("NormalizeArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func parseArgs(t *testing.T, args ...string) (Config, []string, error) {
	t.Helper()
	return ParseArgs(args, nil)
}

func TestFlags(t *testing.T) {
	t.Run("GIE sim-deployment arguments", func(t *testing.T) {
		cfg, warnings, err := parseArgs(t, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--max-loras", "2",
			"--lora-modules", `{"name": "food-review-1"}`, "--enable-kvcache", "--kv-cache-size", "1024", "--block-size", "16", "--mode", "echo")
		if err != nil {
			t.Fatal(err)
		}
		if len(warnings) != 0 {
			t.Errorf("warnings = %v, want none", warnings)
		}
		want := []LoraModule{{Name: "food-review-1"}}
		if diff := cmp.Diff(want, cfg.LoraModules); diff != "" {
			t.Errorf("LoraModules (-want +got):\n%s", diff)
		}
		if cfg.MaxLoras != 2 || cfg.MaxCPULoras != 2 || !cfg.EnableKVCache || cfg.Mode != ModeEcho || cfg.Port != 8000 {
			t.Errorf("config = %+v", cfg)
		}
	})
	t.Run("a v0.10.2 command line seen in the wild", func(t *testing.T) {
		// docker run ghcr.io/llm-d/llm-d-inference-sim:v0.10.2 ... (public scripts): Go durations.
		cfg, warnings, err := parseArgs(t, "--model", "test-model", "--mode", "echo", "--max-model-len", "8192",
			"--enable-kvcache", "--kv-cache-size", "512", "--block-size", "16", "--max-num-seqs", "64",
			"--time-to-first-token", "50ms", "--inter-token-latency", "20ms", "--time-factor-under-load", "2.5")
		if err != nil || len(warnings) != 0 {
			t.Fatalf("err %v, warnings %v", err, warnings)
		}
		if cfg.TimeToFirstToken.D() != 50*time.Millisecond || cfg.InterTokenLatency.D() != 20*time.Millisecond || cfg.TimeFactorUnderLoad != 2.5 {
			t.Errorf("latency = %+v", cfg.Latency)
		}
	})
	t.Run("durations and failure types", func(t *testing.T) {
		cfg, _, err := parseArgs(t, "--model", "m", "--inter-token-latency", "12ms", "--inter-token-latency-std-dev", "2",
			"--prefill-overhead", "30ms", "--prefill-time-per-token", "250us", "--time-factor-under-load", "2",
			"--failure-injection-rate", "50", "--failure-types", "rate_limit", "reset")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.InterTokenLatency.D() != 12*time.Millisecond || cfg.InterTokenLatencyStdDev.D() != 2*time.Millisecond ||
			cfg.PrefillTimePerToken.D() != 250*time.Microsecond || cfg.TimeFactorUnderLoad != 2 {
			t.Errorf("latency = %+v", cfg.Latency)
		}
		if diff := cmp.Diff([]string{"rate_limit", "reset"}, cfg.FailureTypes); diff != "" {
			t.Errorf("FailureTypes (-want +got):\n%s", diff)
		}
	})
	t.Run("ignored simulator flags warn", func(t *testing.T) {
		_, warnings, err := parseArgs(t, "--model", "m", "--zmq-endpoint", "tcp://x:1", "--enable-sleep-mode", "--tensor-parallel-size", "2", "-v", "5")
		if err != nil {
			t.Fatal(err)
		}
		if len(warnings) != 4 || !strings.Contains(strings.Join(warnings, "\n"), "--zmq-endpoint") {
			t.Errorf("warnings = %v, want 4 naming the flags", warnings)
		}
	})
	t.Run("fake metrics", func(t *testing.T) {
		cfg, _, err := parseArgs(t, "--model", "m", "--fake-metrics",
			`{"running-requests":3,"waiting-requests":7,"kv-cache-usage":0.4,"loras":[{"running":"a","waiting":"b","timestamp":1257894567}]}`)
		if err != nil {
			t.Fatal(err)
		}
		want := &FakeMetrics{RunningRequests: 3, WaitingRequests: 7, KVCacheUsage: 0.4,
			Loras: []LoraMetrics{{Running: "a", Waiting: "b", Timestamp: 1257894567}}}
		if diff := cmp.Diff(want, cfg.FakeMetrics); diff != "" {
			t.Errorf("FakeMetrics (-want +got):\n%s", diff)
		}
	})
	t.Run("faithful-fakes flags and the simulator's embedding flag", func(t *testing.T) {
		cfg, warnings, err := parseArgs(t, "--model", "m", "--metrics-names", "legacy", "--default-embedding-dimensions", "64")
		if err != nil || len(warnings) != 0 {
			t.Fatalf("err %v warnings %v", err, warnings)
		}
		if cfg.MetricsNames != MetricsLegacy || cfg.EmbeddingDim != 64 || cfg.LoRAEnabled() || cfg.DataParallelMode != DataParallelPorts {
			t.Errorf("config = %+v", cfg)
		}
		cfg, _, err = parseArgs(t, "--model", "m", "--embedding-dim", "8", "--enable-lora", "--data-parallel-size", "2", "--data-parallel-mode", "internal")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.EmbeddingDim != 8 || cfg.MaxLoras != 1 || !cfg.LoRAEnabled() || cfg.DataParallelMode != DataParallelInternal || cfg.MetricsNames != MetricsCurrent {
			t.Errorf("config = %+v", cfg)
		}
	})
	t.Run("LoRA is off by default and on with adapters or max-loras", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want int
		}{
			{nil, 0},
			{[]string{"--lora-modules", `{"name":"a"}`}, 1},
			{[]string{"--max-loras", "3"}, 3},
		} {
			cfg, _, err := parseArgs(t, append([]string{"--model", "m"}, tc.args...)...)
			if err != nil || cfg.MaxLoras != tc.want || cfg.LoRAEnabled() != (tc.want > 0) {
				t.Errorf("%v: MaxLoras %d (err %v), want %d", tc.args, cfg.MaxLoras, err, tc.want)
			}
		}
	})
	errCases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown metrics generation", []string{"--model", "m", "--metrics-names", "v0"}, "metrics-names"},
		{"unknown data-parallel mode", []string{"--model", "m", "--data-parallel-mode", "external"}, "data-parallel-mode"},
		{"internal data parallelism with legacy names", []string{"--model", "m", "--data-parallel-mode", "internal", "--metrics-names", "legacy"}, "data-parallel-mode"},
		{"zero embedding dim", []string{"--model", "m", "--embedding-dim", "0"}, "default-embedding-dimensions"},
		{"negative max-loras", []string{"--model", "m", "--max-loras", "-1"}, "max-loras"},
		{"no model", []string{"--port", "1"}, "model"},
		{"bad mode", []string{"--model", "m", "--mode", "x"}, "mode"},
		{"rate over 100", []string{"--model", "m", "--failure-injection-rate", "101"}, "failure-injection-rate"},
		{"unknown failure", []string{"--model", "m", "--failure-types", "boom"}, "failure-types"},
		{"bad block size", []string{"--model", "m", "--block-size", "12"}, "block-size"},
		{"std dev over 30%", []string{"--model", "m", "--inter-token-latency", "10ms", "--inter-token-latency-std-dev", "5ms"}, "inter-token-latency-std-dev"},
		{"bad lora json", []string{"--model", "m", "--lora-modules", "{name}"}, "lora-modules"},
		{"lora unknown key", []string{"--model", "m", "--lora-modules", `{"nam":"a"}`}, "lora-modules"},
		{"fake metrics unknown key", []string{"--model", "m", "--fake-metrics", `{"running":1}`}, "unknown key"},
		{"fake metrics kv over 1", []string{"--model", "m", "--fake-metrics", `{"kv-cache-usage":2}`}, "kv-cache-usage"},
		{"dp size 9", []string{"--model", "m", "--data-parallel-size", "9"}, "data-parallel-size"},
		{"bad duration", []string{"--model", "m", "--time-to-first-token", "fast"}, "invalid duration"},
		{"unknown flag", []string{"--model", "m", "--no-such-flag", "1"}, "no-such-flag"},
		{"kv cache smaller than one context", []string{"--model", "m", "--max-model-len", "8192", "--kv-cache-size", "512", "--block-size", "8"}, "kv-cache-size"},
		{"cpu loras below loras", []string{"--model", "m", "--max-loras", "3", "--max-cpu-loras", "2"}, "max-cpu-loras"},
		{"lora name with a comma", []string{"--model", "m", "--lora-modules", `{"name":"a,b"}`}, "lora-modules[0]"},
		{"lora name with a control character", []string{"--model", "m", "--lora-modules", `{"name":"a\u0007"}`}, "lora-modules[0]"},
		{"lora name is the base model", []string{"--model", "m", "--lora-modules", `{"name":"m"}`}, "lora-modules[0]"},
		{"lora name is a served name", []string{"--model", "m", "--served-model-name", "s", "--lora-modules", `{"name":"s"}`}, "lora-modules[0]"},
		{"empty served model name", []string{"--model", "m", "--served-model-name", ""}, "served-model-name[0]"},
		{"two fake-metrics values", []string{"--model", "m", "--fake-metrics", `{"running-requests":1}`, `{"running-requests":2}`}, "--fake-metrics"},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseArgs(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	yaml := `model: from-file
port: 9000
max-num-seqs: 7
inter-token-latency: 5ms
lora-modules:
- '{"name":"l1"}'
- name: l2
zmq-endpoint: tcp://ignored:1
`
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := parseArgs(t, "--config", p, "--port", "9100")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model != "from-file" || cfg.Port != 9100 || cfg.MaxNumSeqs != 7 || cfg.InterTokenLatency.D() != 5*time.Millisecond {
		t.Errorf("config = %+v (flags must override the file)", cfg)
	}
	if diff := cmp.Diff([]LoraModule{{Name: "l1"}, {Name: "l2"}}, cfg.LoraModules); diff != "" {
		t.Errorf("LoraModules (-want +got):\n%s", diff)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "zmq-endpoint") {
		t.Errorf("warnings = %v, want one for zmq-endpoint", warnings)
	}
	if err := os.WriteFile(p, []byte("model: m\nbogus-key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := parseArgs(t, "--config", p); err == nil || !strings.Contains(err.Error(), "bogus-key") {
		t.Errorf("error = %v, want one naming bogus-key", err)
	}
}
