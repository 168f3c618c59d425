package framework

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

func ptr[T any](v T) *T { return &v }

func TestLoadConfigDefaultsAndShapes(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *EndpointPickerConfig
	}{
		{
			name: "minimal config gets every registry-free default",
			yaml: header,
			want: &EndpointPickerConfig{
				APIVersion: ConfigAPIVersion, Kind: ConfigKind,
				SaturationDetector: &SaturationDetectorConfig{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8,
					MetricsStalenessThreshold: Duration{200 * time.Millisecond}},
				PrepareData: &PrepareDataConfig{TimeoutMs: 400},
			},
		},
		{
			name: "empty name becomes the type, float weights, nil weight kept nil, parameters kept raw",
			yaml: header + `
plugins:
- type: queue-scorer
- name: prefix
  type: prefix-cache-scorer
  parameters:
    blockSizeTokens: 32
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 1.5
  - pluginRef: prefix
  - pluginRef: max-score-picker
prepareData:
  timeoutMs: 50
saturationDetector:
  queueDepthThreshold: 7
  kvCacheUtilThreshold: 0.5
  metricsStalenessThreshold: 1s
`,
			want: &EndpointPickerConfig{
				APIVersion: ConfigAPIVersion, Kind: ConfigKind,
				Plugins: []PluginSpec{
					{Name: "queue-scorer", Type: "queue-scorer"},
					{Name: "prefix", Type: "prefix-cache-scorer", Parameters: json.RawMessage(`{"blockSizeTokens":32}`)},
					{Name: "max-score-picker", Type: "max-score-picker"},
				},
				SchedulingProfiles: []ProfileSpec{{Name: "default", Plugins: []ProfilePluginRef{
					{PluginRef: "queue-scorer", Weight: ptr(1.5)},
					{PluginRef: "prefix"},
					{PluginRef: "max-score-picker"},
				}}},
				SaturationDetector: &SaturationDetectorConfig{QueueDepthThreshold: 7, KVCacheUtilThreshold: 0.5,
					MetricsStalenessThreshold: Duration{time.Second}},
				PrepareData: &PrepareDataConfig{TimeoutMs: 50},
			},
		},
		{
			name: "retired and unknown feature gates and the data section are warnings",
			yaml: header + `
featureGates: [prepareDataPlugins, dataLayer, somethingNew]
data:
  sources:
  - pluginRef: metrics
`,
			want: &EndpointPickerConfig{
				APIVersion: ConfigAPIVersion, Kind: ConfigKind,
				FeatureGates: []string{"prepareDataPlugins", "dataLayer", "somethingNew"},
				SaturationDetector: &SaturationDetectorConfig{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8,
					MetricsStalenessThreshold: Duration{200 * time.Millisecond}},
				Data:        json.RawMessage(`{"sources":[{"pluginRef":"metrics"}]}`),
				PrepareData: &PrepareDataConfig{TimeoutMs: 400},
				Warnings: []string{
					`featureGates[0]: feature gate "prepareDataPlugins" is retired (the feature is always on); remove it`,
					`featureGates[1]: feature gate "dataLayer" is retired (the feature is always on); remove it`,
					`featureGates[2]: unknown feature gate "somethingNew" is ignored`,
					`data: section accepted but not used (keys [sources]); the reference EPP's data layer is configured by flags`,
				},
			},
		},
		{
			name: "JSON input is YAML too",
			yaml: `{"apiVersion":"inference.networking.x-k8s.io/v1alpha1","kind":"EndpointPickerConfig","plugins":[{"type":"random-picker"}]}`,
			want: &EndpointPickerConfig{
				APIVersion: ConfigAPIVersion, Kind: ConfigKind,
				Plugins: []PluginSpec{{Name: "random-picker", Type: "random-picker"}},
				SaturationDetector: &SaturationDetectorConfig{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8,
					MetricsStalenessThreshold: Duration{200 * time.Millisecond}},
				PrepareData: &PrepareDataConfig{TimeoutMs: 400},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadConfig([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string // the exact error text
	}{
		{"empty document", "", "config: empty document"},
		{"missing apiVersion", "kind: EndpointPickerConfig\n", `apiVersion: got "", want "inference.networking.x-k8s.io/v1alpha1" or "llm-d.ai/v1alpha1"`},
		{"wrong kind", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: Foo\n", `kind: got "Foo", want "EndpointPickerConfig"`},
		{"unknown top-level field", header + "pluginz: []\n", `config: unknown field "pluginz"`},
		{"duplicate key", header + "kind: EndpointPickerConfig\n", "config: yaml: unmarshal errors:\n  line 3: key \"kind\" already set in map"},
		{"unknown plugin field", header + "plugins:\n- type: a\n- type: b\n  parameter: {}\n", `plugins[1]: unknown field "parameter"`},
		{"plugin without type", header + "plugins:\n- name: a\n", `plugins[0].type: required`},
		{"duplicate plugin name", header + "plugins:\n- type: a\n- name: a\n  type: b\n", `plugins[1].name: duplicate plugin name "a" (also plugins[0], type "a")`},
		{"slash in name", header + "plugins:\n- name: a/b\n  type: b\n", `plugins[0].name: "a/b" must not contain '/' or white space`},
		{"parameters not an object", header + "plugins:\n- type: a\n  parameters: [1]\n", `plugins[0].parameters (a/a): must be an object, got [1]`},
		{"unknown profile field", header + "schedulingProfiles:\n- name: p\n  plugin: []\n", `schedulingProfiles[0]: unknown field "plugin"`},
		{"unknown profile plugin field", header + "plugins:\n- type: a\n- type: b\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n  - pluginRef: b\n    wieght: 2\n",
			`schedulingProfiles[0].plugins[1]: unknown field "wieght"`},
		{"profile without name", header + "schedulingProfiles:\n- plugins: []\n", `schedulingProfiles[0].name: required`},
		{"duplicate profile", header + "schedulingProfiles:\n- name: p\n- name: p\n", `schedulingProfiles[1].name: duplicate profile name "p" (also schedulingProfiles[0])`},
		{"unknown pluginRef", header + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: b\n",
			`schedulingProfiles[0].plugins[0].pluginRef: no plugin named "b" in plugins (profile "p")`},
		{"empty pluginRef", header + "schedulingProfiles:\n- name: p\n  plugins:\n  - weight: 1\n", `schedulingProfiles[0].plugins[0].pluginRef: required`},
		{"pluginRef twice", header + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n  - pluginRef: a\n",
			`schedulingProfiles[0].plugins[1].pluginRef: plugin "a" is already referenced by schedulingProfiles[0].plugins[0]`},
		{"negative weight", header + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    weight: -0.5\n",
			`schedulingProfiles[0].plugins[0].weight: plugin "a": weight must be a finite number ≥ 0, got -0.5`},
		{"weight not a number", header + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    weight: heavy\n",
			`schedulingProfiles[0].plugins[0]: cannot unmarshal string into Go struct field ProfilePluginRef.weight of type float64`},
		{"unknown saturationDetector field", header + "saturationDetector:\n  queueDepth: 3\n", `saturationDetector: unknown field "queueDepth"`},
		{"staleness as number", header + "saturationDetector:\n  metricsStalenessThreshold: 200\n",
			`saturationDetector: want a duration string like "200ms", got 200`},
		{"staleness bad string", header + "saturationDetector:\n  metricsStalenessThreshold: soon\n",
			`saturationDetector: want a duration string like "200ms": time: invalid duration "soon"`},
		{"negative queue threshold", header + "saturationDetector:\n  queueDepthThreshold: -1\n", `saturationDetector.queueDepthThreshold: must be ≥ 0, got -1`},
		{"kv threshold above 1", header + "saturationDetector:\n  kvCacheUtilThreshold: 1.5\n", `saturationDetector.kvCacheUtilThreshold: must be in [0,1], got 1.5`},
		{"negative staleness", header + "saturationDetector:\n  metricsStalenessThreshold: -1s\n", `saturationDetector.metricsStalenessThreshold: must be ≥ 0, got -1s`},
		{"unknown prepareData field", header + "prepareData:\n  timeout: 5\n", `prepareData: unknown field "timeout"`},
		{"negative prepareData timeout", header + "prepareData:\n  timeoutMs: -5\n", `prepareData.timeoutMs: must be > 0, got -5`},
		{"data not an object", header + "data: 5\n", `data: must be an object: json: cannot unmarshal number into Go value of type map[string]json.RawMessage`},
		{"empty feature gate", header + "featureGates: ['']\n", `featureGates[0]: empty gate name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("LoadConfig succeeded (%+v), want error %q", cfg, tc.wantErr)
			}
			if err.Error() != tc.wantErr {
				t.Fatalf("error mismatch:\n got: %s\nwant: %s", err, tc.wantErr)
			}
		})
	}
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(header+"plugins:\n- type: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfigFile(good)
	if err != nil || len(cfg.Plugins) != 1 {
		t.Fatalf("LoadConfigFile(good) = %+v, %v", cfg, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(header+"plugins:\n- tpye: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfigFile(bad); err == nil || err.Error() != bad+`: plugins[0]: unknown field "tpye"` {
		t.Fatalf("LoadConfigFile(bad) error = %v", err)
	}
	if _, err := LoadConfigFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("LoadConfigFile(missing) error = %v", err)
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	want := []ProfileSpec{{Name: "default", Plugins: []ProfilePluginRef{
		{PluginRef: "queue-scorer", Weight: ptr(2.0)},
		{PluginRef: "kv-cache-utilization-scorer", Weight: ptr(2.0)},
		{PluginRef: "prefix-cache-scorer", Weight: ptr(3.0)},
		{PluginRef: "max-score-picker"},
	}}}
	if diff := cmp.Diff(want, cfg.SchedulingProfiles); diff != "" {
		t.Fatalf("default profile (-want +got):\n%s", diff)
	}
	if cfg.PrepareData.TimeoutMs != 400 || cfg.SaturationDetector.QueueDepthThreshold != 5 {
		t.Fatalf("defaults not applied: %+v %+v", cfg.PrepareData, cfg.SaturationDetector)
	}
	// Normalize is idempotent: a second call changes nothing.
	again := *cfg
	if err := again.Normalize(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cfg, &again); diff != "" {
		t.Fatalf("Normalize not idempotent (-first +second):\n%s", diff)
	}
}

func TestPrepareDataTimeout(t *testing.T) {
	tests := []struct {
		cfg  *PrepareDataConfig
		want time.Duration
	}{
		{nil, 400 * time.Millisecond},
		{&PrepareDataConfig{}, 400 * time.Millisecond},
		{&PrepareDataConfig{TimeoutMs: 25}, 25 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := tc.cfg.Timeout(); got != tc.want {
			t.Errorf("Timeout(%+v) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func TestDurationRoundTrip(t *testing.T) {
	b, err := json.Marshal(Duration{1500 * time.Millisecond})
	if err != nil || string(b) != `"1.5s"` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var d Duration
	if err := json.Unmarshal(b, &d); err != nil || d.Duration != 1500*time.Millisecond {
		t.Fatalf("Unmarshal = %v, %v", d, err)
	}
}

func TestStrictFieldCase(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"profile weight in another case", header + "plugins:\n- type: a\nschedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: a\n    Weight: 2\n",
			`schedulingProfiles[0].plugins[0]: unknown field "Weight" (field names are case-sensitive: "weight")`},
		{"top-level key in another case", header + "Plugins: []\n", `config: unknown field "Plugins" (field names are case-sensitive: "plugins")`},
		{"prepareData key in another case", header + "prepareData:\n  timeoutMS: 5\n", `prepareData: unknown field "timeoutMS" (field names are case-sensitive: "timeoutMs")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig([]byte(tc.yaml))
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error mismatch:\n got: %v\nwant: %s", err, tc.wantErr)
			}
		})
	}

	type inner struct {
		Embedded int `json:"embedded"`
	}
	type params struct {
		inner
		BlockSize int `json:"blockSize"`
		Untagged  int
		Skipped   int `json:"-"`
	}
	for in, wantErr := range map[string]string{
		`{"blockSize": 1, "embedded": 2, "Untagged": 3}`: "",
		`{"blocksize": 1}`: `parameters: json: unknown field "blocksize" (field names are case-sensitive: "blockSize")`,
		`{"Embedded": 1}`:  `parameters: json: unknown field "Embedded" (field names are case-sensitive: "embedded")`,
		`{"Skipped": 1}`:   `parameters: json: unknown field "Skipped"`,
	} {
		var p params
		err := DecodeParameters(json.RawMessage(in), &p)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != wantErr {
			t.Errorf("DecodeParameters(%s) error = %q, want %q", in, got, wantErr)
		}
	}
}

// TestDefaultConfigFile: manifests/epp-configs/default.yaml, the "reference" policy of eppkit
// bench, is exactly DefaultConfig.
func TestDefaultConfigFile(t *testing.T) {
	got, err := LoadConfigFile(filepath.Join("..", "..", "manifests", "epp-configs", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultConfig(), got); diff != "" {
		t.Errorf("default.yaml differs from DefaultConfig (-want +got):\n%s", diff)
	}
}
