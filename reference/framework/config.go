package framework

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config identity (SPEC §1). Upstream: gateway-api-inference-extension, apix/config/v1alpha1.
const (
	ConfigAPIVersion = "inference.networking.x-k8s.io/v1alpha1"
	// ConfigAPIVersionLLMD is llm-d-router v0.10.0's apiVersion of the same config
	// (apix/config/v1alpha1, group llm-d.ai), accepted as well; upstream accepts ours with a
	// deprecation note (config/loader/configloader.go).
	ConfigAPIVersionLLMD = "llm-d.ai/v1alpha1"
	ConfigKind           = "EndpointPickerConfig"
)

// Config defaults (SPEC §1, §1.1, §3).
const (
	// DefaultPrepareDataTimeoutMs is the PrepareData phase budget in milliseconds.
	DefaultPrepareDataTimeoutMs = 400
	// DefaultQueueDepthThreshold is the saturation detector's waiting-queue bound (requests).
	DefaultQueueDepthThreshold = 5
	// DefaultKVCacheUtilThreshold is the saturation detector's KV-cache bound, a fraction in [0,1].
	DefaultKVCacheUtilThreshold = 0.8
	// DefaultMetricsStalenessThreshold is how old an endpoint's metrics may be and still count as fresh.
	DefaultMetricsStalenessThreshold = 200 * time.Millisecond
	// DefaultProfileName is the name of the profile made when a config has no schedulingProfiles.
	DefaultProfileName = "default"
	// DefaultProfileHandlerType is instantiated when a config has one profile and no profile handler.
	DefaultProfileHandlerType = "single-profile-handler"
	// DefaultPickerType is instantiated for a profile without a picker.
	DefaultPickerType = "max-score-picker"
)

// RetiredFeatureGates are feature gates that upstream retired once the feature became the default.
// A config may still list them; the loader accepts them with a deprecation warning.
var RetiredFeatureGates = []string{"prepareDataPlugins", "dataLayer"}

// EndpointPickerConfig is the reference EPP's configuration file (SPEC §1), the upstream
// `EndpointPickerConfig` (gateway-api-inference-extension, apix/config/v1alpha1/endpointpickerconfig_types.go)
// plus eppkit's `prepareData` section.
//
// LoadConfig fills in the defaults that need no plugin registry (instance names, prepareData and
// saturationDetector defaults); NewRuntime applies the rest (default profile, profile handler,
// picker, scorer weights), because they depend on what each plugin type is.
type EndpointPickerConfig struct {
	// APIVersion must be ConfigAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind must be ConfigKind.
	Kind string `json:"kind"`
	// FeatureGates lists enabled feature gates. Retired gates are accepted with a warning; gates
	// eppkit does not know are ignored with a warning.
	FeatureGates []string `json:"featureGates,omitempty"`
	// Plugins are the plugin instances, in config order.
	Plugins []PluginSpec `json:"plugins,omitempty"`
	// SchedulingProfiles are the scheduling profiles; empty means one profile "default" with every
	// filter, scorer and picker of Plugins.
	SchedulingProfiles []ProfileSpec `json:"schedulingProfiles,omitempty"`
	// SaturationDetector holds the pool saturation thresholds; LoadConfig never leaves it nil.
	SaturationDetector *SaturationDetectorConfig `json:"saturationDetector,omitempty"`
	// Data is upstream's data-layer section. It is accepted and kept raw; the reference EPP's data
	// layer is configured by flags, so LoadConfig warns that the section is not used.
	Data json.RawMessage `json:"data,omitempty"`
	// PrepareData configures the PrepareData phase (eppkit); LoadConfig never leaves it nil.
	PrepareData *PrepareDataConfig `json:"prepareData,omitempty"`
	// FlowControl configures flow control (llm-d-router v0.10.0's section), used only with the
	// flowControl feature gate (FlowControlEnabled); nil = upstream's defaults.
	FlowControl *FlowControlConfig `json:"flowControl,omitempty"`

	// Warnings are the loader's non-fatal findings (retired or unknown feature gates, ignored
	// sections), one sentence each. NewRuntime logs them at WARN level.
	Warnings []string `json:"-"`
}

// PluginSpec is one entry of `plugins`.
type PluginSpec struct {
	// Name is the instance name; empty means Type.
	Name string `json:"name,omitempty"`
	// Type is the registered plugin type (required).
	Type string `json:"type"`
	// Parameters is the raw JSON object handed to the plugin's factory, which decodes it strictly
	// (DecodeParameters). Nil when absent.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// ProfileSpec is one entry of `schedulingProfiles`.
type ProfileSpec struct {
	// Name is the profile name (required, unique).
	Name string `json:"name"`
	// Plugins reference plugin instances by name: filters (run in this order), scorers and at most
	// one picker.
	Plugins []ProfilePluginRef `json:"plugins"`
}

// ProfilePluginRef references a plugin from a profile.
type ProfilePluginRef struct {
	// PluginRef is the instance name of a plugin in `plugins`.
	PluginRef string `json:"pluginRef"`
	// Weight is a scorer's weight, a float ≥ 0; nil means 1. Ignored for filters and pickers.
	Weight *float64 `json:"weight,omitempty"`
}

// SaturationDetectorConfig holds the thresholds that decide whether the pool is saturated (SPEC §3).
type SaturationDetectorConfig struct {
	// QueueDepthThreshold: an endpoint with more waiting requests than this is saturated (requests, ≥ 0).
	QueueDepthThreshold int `json:"queueDepthThreshold,omitempty"`
	// KVCacheUtilThreshold: an endpoint with KV-cache use above this is saturated (fraction in [0,1]).
	KVCacheUtilThreshold float64 `json:"kvCacheUtilThreshold,omitempty"`
	// MetricsStalenessThreshold: metrics older than this do not count as fresh (a Go duration string
	// in YAML, e.g. "200ms").
	MetricsStalenessThreshold Duration `json:"metricsStalenessThreshold,omitempty"`
}

// PrepareDataConfig configures the PrepareData phase.
type PrepareDataConfig struct {
	// TimeoutMs is the budget of the whole PrepareData phase in milliseconds (> 0; 0 means the
	// default, 400). Plugins still running when it ends are cancelled and their writes discarded.
	TimeoutMs int `json:"timeoutMs,omitempty"`
}

// Timeout returns TimeoutMs as a duration, the default when unset.
func (p *PrepareDataConfig) Timeout() time.Duration {
	if p == nil || p.TimeoutMs <= 0 {
		return DefaultPrepareDataTimeoutMs * time.Millisecond
	}
	return time.Duration(p.TimeoutMs) * time.Millisecond
}

// Duration is a time.Duration written in YAML/JSON as a Go duration string ("200ms", "1s").
type Duration struct {
	time.Duration
}

// UnmarshalJSON accepts a Go duration string. Numbers are rejected because their unit would be a
// guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"200ms\", got %s", string(b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string like \"200ms\": %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// rawConfig is the first decoding stage: the list elements stay raw so that each can be decoded
// strictly on its own and its errors carry the element's path.
type rawConfig struct {
	APIVersion         string            `json:"apiVersion"`
	Kind               string            `json:"kind"`
	FeatureGates       []string          `json:"featureGates"`
	Plugins            []json.RawMessage `json:"plugins"`
	SchedulingProfiles []json.RawMessage `json:"schedulingProfiles"`
	SaturationDetector json.RawMessage   `json:"saturationDetector"`
	Data               json.RawMessage   `json:"data"`
	PrepareData        json.RawMessage   `json:"prepareData"`
	FlowControl        json.RawMessage   `json:"flowControl"`
}

type rawProfile struct {
	Name    string            `json:"name"`
	Plugins []json.RawMessage `json:"plugins"`
}

// LoadConfigFile reads and loads a config file; see LoadConfig.
func LoadConfigFile(path string) (*EndpointPickerConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := LoadConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// LoadConfig decodes an EndpointPickerConfig from YAML (or JSON) strictly: duplicate keys and
// unknown fields anywhere are errors whose text starts with the field path, for example
// `schedulingProfiles[0].plugins[1]: unknown field "wieght"`. Plugin `parameters` are kept raw and
// decoded strictly by each plugin's factory when NewRuntime builds it (errors then read
// `plugins[2] (name/type): parameters: json: unknown field "blockSze"`).
//
// It validates apiVersion and kind, plugin types (present) and names (unique; empty = type),
// profile names (present, unique), pluginRefs (known, not repeated in a profile) and weights (finite,
// ≥ 0), saturationDetector and prepareData; it fills in the prepareData and saturationDetector
// defaults. Non-fatal findings are returned in cfg.Warnings.
func LoadConfig(data []byte) (*EndpointPickerConfig, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("config: empty document")
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw rawConfig
	if err := decodeStrict(js, &raw); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg := &EndpointPickerConfig{
		APIVersion:   raw.APIVersion,
		Kind:         raw.Kind,
		FeatureGates: raw.FeatureGates,
	}
	for i, elem := range raw.Plugins {
		var p PluginSpec
		if err := decodeStrict(elem, &p); err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		cfg.Plugins = append(cfg.Plugins, p)
	}
	for i, elem := range raw.SchedulingProfiles {
		var rp rawProfile
		if err := decodeStrict(elem, &rp); err != nil {
			return nil, fmt.Errorf("schedulingProfiles[%d]: %w", i, err)
		}
		ps := ProfileSpec{Name: rp.Name}
		for j, pe := range rp.Plugins {
			var ref ProfilePluginRef
			if err := decodeStrict(pe, &ref); err != nil {
				return nil, fmt.Errorf("schedulingProfiles[%d].plugins[%d]: %w", i, j, err)
			}
			ps.Plugins = append(ps.Plugins, ref)
		}
		cfg.SchedulingProfiles = append(cfg.SchedulingProfiles, ps)
	}
	if !isNullJSON(raw.SaturationDetector) {
		cfg.SaturationDetector = &SaturationDetectorConfig{}
		if err := decodeStrict(raw.SaturationDetector, cfg.SaturationDetector); err != nil {
			return nil, fmt.Errorf("saturationDetector: %w", err)
		}
	}
	if !isNullJSON(raw.PrepareData) {
		cfg.PrepareData = &PrepareDataConfig{}
		if err := decodeStrict(raw.PrepareData, cfg.PrepareData); err != nil {
			return nil, fmt.Errorf("prepareData: %w", err)
		}
	}
	if !isNullJSON(raw.Data) {
		cfg.Data = raw.Data
	}
	if !isNullJSON(raw.FlowControl) {
		cfg.FlowControl = &FlowControlConfig{}
		if err := decodeStrict(raw.FlowControl, cfg.FlowControl); err != nil {
			return nil, fmt.Errorf("flowControl: %w", err)
		}
	}
	if err := cfg.Normalize(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Normalize validates c and applies the defaults that need no registry, in place: empty plugin
// names become the type, nil saturationDetector and prepareData sections get their defaults, and
// warnings (retired or unknown feature gates, the unused data section) are recorded in c.Warnings
// (replacing earlier ones). It is idempotent; LoadConfig and NewRuntime call it.
func (c *EndpointPickerConfig) Normalize() error {
	c.Warnings = nil
	if c.APIVersion != ConfigAPIVersion && c.APIVersion != ConfigAPIVersionLLMD {
		return fmt.Errorf("apiVersion: got %q, want %q or %q", c.APIVersion, ConfigAPIVersion, ConfigAPIVersionLLMD)
	}
	if c.Kind != ConfigKind {
		return fmt.Errorf("kind: got %q, want %q", c.Kind, ConfigKind)
	}
	for i, g := range c.FeatureGates {
		switch {
		case g == "":
			return fmt.Errorf("featureGates[%d]: empty gate name", i)
		case g == FlowControlFeatureGate:
		case slices.Contains(RetiredFeatureGates, g):
			c.Warnings = append(c.Warnings, fmt.Sprintf(
				"featureGates[%d]: feature gate %q is retired (the feature is always on); remove it", i, g))
		default:
			c.Warnings = append(c.Warnings, fmt.Sprintf(
				"featureGates[%d]: unknown feature gate %q is ignored", i, g))
		}
	}

	names := map[string]int{}
	for i := range c.Plugins {
		p := &c.Plugins[i]
		if p.Type == "" {
			return fmt.Errorf("plugins[%d].type: required", i)
		}
		if p.Name == "" {
			p.Name = p.Type
		}
		if strings.ContainsAny(p.Name, "/ \t\n") {
			return fmt.Errorf("plugins[%d].name: %q must not contain '/' or white space", i, p.Name)
		}
		if j, dup := names[p.Name]; dup {
			return fmt.Errorf("plugins[%d].name: duplicate plugin name %q (also plugins[%d], type %q)",
				i, p.Name, j, c.Plugins[j].Type)
		}
		names[p.Name] = i
		if t := bytes.TrimSpace(p.Parameters); len(t) > 0 && !bytes.Equal(t, []byte("null")) && t[0] != '{' {
			return fmt.Errorf("plugins[%d].parameters (%s/%s): must be an object, got %s", i, p.Name, p.Type, string(t))
		}
	}

	profiles := map[string]int{}
	for i, ps := range c.SchedulingProfiles {
		if ps.Name == "" {
			return fmt.Errorf("schedulingProfiles[%d].name: required", i)
		}
		if j, dup := profiles[ps.Name]; dup {
			return fmt.Errorf("schedulingProfiles[%d].name: duplicate profile name %q (also schedulingProfiles[%d])", i, ps.Name, j)
		}
		profiles[ps.Name] = i
		seen := map[string]int{}
		for j, ref := range ps.Plugins {
			path := fmt.Sprintf("schedulingProfiles[%d].plugins[%d]", i, j)
			if ref.PluginRef == "" {
				return fmt.Errorf("%s.pluginRef: required", path)
			}
			if _, ok := names[ref.PluginRef]; !ok {
				return fmt.Errorf("%s.pluginRef: no plugin named %q in plugins (profile %q)", path, ref.PluginRef, ps.Name)
			}
			if k, dup := seen[ref.PluginRef]; dup {
				return fmt.Errorf("%s.pluginRef: plugin %q is already referenced by schedulingProfiles[%d].plugins[%d]",
					path, ref.PluginRef, i, k)
			}
			seen[ref.PluginRef] = j
			if ref.Weight != nil {
				w := *ref.Weight
				if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
					return fmt.Errorf("%s.weight: plugin %q: weight must be a finite number ≥ 0, got %v", path, ref.PluginRef, w)
				}
			}
		}
	}

	if c.SaturationDetector == nil {
		c.SaturationDetector = &SaturationDetectorConfig{}
	}
	sd := c.SaturationDetector
	switch {
	case sd.QueueDepthThreshold < 0:
		return fmt.Errorf("saturationDetector.queueDepthThreshold: must be ≥ 0, got %d", sd.QueueDepthThreshold)
	case math.IsNaN(sd.KVCacheUtilThreshold) || sd.KVCacheUtilThreshold < 0 || sd.KVCacheUtilThreshold > 1:
		return fmt.Errorf("saturationDetector.kvCacheUtilThreshold: must be in [0,1], got %v", sd.KVCacheUtilThreshold)
	case sd.MetricsStalenessThreshold.Duration < 0:
		return fmt.Errorf("saturationDetector.metricsStalenessThreshold: must be ≥ 0, got %s", sd.MetricsStalenessThreshold)
	}
	if sd.QueueDepthThreshold == 0 {
		sd.QueueDepthThreshold = DefaultQueueDepthThreshold
	}
	if sd.KVCacheUtilThreshold == 0 {
		sd.KVCacheUtilThreshold = DefaultKVCacheUtilThreshold
	}
	if sd.MetricsStalenessThreshold.Duration == 0 {
		sd.MetricsStalenessThreshold.Duration = DefaultMetricsStalenessThreshold
	}

	if c.FlowControl != nil {
		if err := c.FlowControl.validate(); err != nil {
			return err
		}
		if ref := c.FlowControl.SaturationDetector; ref != nil && ref.PluginRef != "" {
			if _, ok := names[ref.PluginRef]; !ok {
				return fmt.Errorf("flowControl.saturationDetector.pluginRef: no plugin named %q in plugins", ref.PluginRef)
			}
		}
		if !c.FlowControlEnabled() {
			c.Warnings = append(c.Warnings, fmt.Sprintf(
				"flowControl: section ignored: the %q feature gate is not enabled (featureGates: [%s])", FlowControlFeatureGate, FlowControlFeatureGate))
		}
	}

	if c.PrepareData == nil {
		c.PrepareData = &PrepareDataConfig{}
	}
	if c.PrepareData.TimeoutMs < 0 {
		return fmt.Errorf("prepareData.timeoutMs: must be > 0, got %d", c.PrepareData.TimeoutMs)
	}
	if c.PrepareData.TimeoutMs == 0 {
		c.PrepareData.TimeoutMs = DefaultPrepareDataTimeoutMs
	}

	if !isNullJSON(c.Data) {
		var sections map[string]json.RawMessage
		if err := json.Unmarshal(c.Data, &sections); err != nil {
			return fmt.Errorf("data: must be an object: %w", err)
		}
		keys := make([]string, 0, len(sections))
		for k := range sections {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		c.Warnings = append(c.Warnings, fmt.Sprintf(
			"data: section accepted but not used (keys %v); the reference EPP's data layer is configured by flags", keys))
	}
	return nil
}

// DefaultConfig returns the config used when none is given (SPEC §3): one profile `default` with
// queue-scorer (weight 2), kv-cache-utilization-scorer (2), prefix-cache-scorer (3) and
// max-score-picker. The prefix scorer's producer is added by NewRuntime as the registered default
// producer of the key it consumes.
func DefaultConfig() *EndpointPickerConfig {
	w := func(v float64) *float64 { return &v }
	cfg := &EndpointPickerConfig{
		APIVersion: ConfigAPIVersion,
		Kind:       ConfigKind,
		Plugins: []PluginSpec{
			{Name: "queue-scorer", Type: "queue-scorer"},
			{Name: "kv-cache-utilization-scorer", Type: "kv-cache-utilization-scorer"},
			{Name: "prefix-cache-scorer", Type: "prefix-cache-scorer"},
			{Name: "max-score-picker", Type: "max-score-picker"},
		},
		SchedulingProfiles: []ProfileSpec{{
			Name: DefaultProfileName,
			Plugins: []ProfilePluginRef{
				{PluginRef: "queue-scorer", Weight: w(2)},
				{PluginRef: "kv-cache-utilization-scorer", Weight: w(2)},
				{PluginRef: "prefix-cache-scorer", Weight: w(3)},
				{PluginRef: "max-score-picker"},
			},
		}},
	}
	if err := cfg.Normalize(); err != nil {
		panic("framework: DefaultConfig is invalid: " + err.Error()) // a programming error
	}
	return cfg
}

// decodeStrict decodes one JSON value into dst, rejecting unknown fields (case-sensitively, see
// checkFieldCase) and trailing data. The "json: " prefix of encoding/json errors is dropped;
// callers prefix the field path.
func decodeStrict(data []byte, dst any) error {
	if err := checkFieldCase(data, dst); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return errors.New("trailing data after the value")
	}
	return nil
}

func isNullJSON(b json.RawMessage) bool {
	t := bytes.TrimSpace(b)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}
