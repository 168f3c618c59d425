package framework

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// FlowControlFeatureGate enables flow control (llm-d-router v0.10.0 pkg/epp/flowcontrol/config.go
// FeatureGate, default off). Without it a flowControl section is ignored with a warning.
const FlowControlFeatureGate = "flowControl"

// Flow control defaults (llm-d-router v0.10.0 pkg/epp/flowcontrol/registry/config.go and
// apix/config/v1alpha1 FlowControlConfig).
const (
	// DefaultRequestTTL bounds a request's wait in its queue (defaultRequestTTL).
	DefaultRequestTTL = 60 * time.Second
	// DefaultBandMaxRequests is a priority band's queue capacity in requests.
	DefaultBandMaxRequests = 5000
	// DefaultBandMaxBytes is a priority band's queue capacity in body bytes (1G).
	DefaultBandMaxBytes = 1_000_000_000
	// DefaultFairnessPolicy and DefaultOrderingPolicy are the only policies the reference has:
	// the globally oldest head first (across fairness ids), first come first served in a flow.
	DefaultFairnessPolicy = "global-strict-fairness-policy"
	DefaultOrderingPolicy = "fcfs-ordering-policy"
	// DefaultSaturationDetector is the detector used when flowControl.saturationDetector names none.
	DefaultSaturationDetector = "utilization-detector"
)

// FlowControlConfig is the flowControl section, llm-d-router v0.10.0's field names
// (apix/config/v1alpha1/endpointpickerconfig_types.go FlowControlConfig). Quantities accept
// Kubernetes resource quantities ("1Gi", "500M", "1k"); durations Go duration strings.
type FlowControlConfig struct {
	// MaxBytes and MaxRequests bound every queue together; omitted or 0 = unlimited.
	MaxBytes    *resource.Quantity `json:"maxBytes,omitempty"`
	MaxRequests *resource.Quantity `json:"maxRequests,omitempty"`
	// DefaultRequestTTL bounds a request's wait in its queue; omitted = 60s, "0s" = no bound.
	DefaultRequestTTL *Duration `json:"defaultRequestTTL,omitempty"`
	// DefaultPriorityBand is the template of bands for priorities PriorityBands does not list;
	// DefaultNegativePriorityBand the template for priorities < 0 (falls back to
	// DefaultPriorityBand). Their priority field is ignored.
	DefaultPriorityBand         *PriorityBandConfig `json:"defaultPriorityBand,omitempty"`
	DefaultNegativePriorityBand *PriorityBandConfig `json:"defaultNegativePriorityBand,omitempty"`
	// PriorityBands configure given priorities (unique).
	PriorityBands []PriorityBandConfig `json:"priorityBands,omitempty"`
	// UsageLimitPolicyPluginRef names a usage-limit policy plugin; the reference has only
	// upstream's default (static, ceiling 1.0 for every band), so it must be empty.
	UsageLimitPolicyPluginRef string `json:"usageLimitPolicyPluginRef,omitempty"`
	// SaturationDetector names the detector plugin (utilization-detector or concurrency-detector);
	// omitted = a utilization-detector with the top-level saturationDetector's thresholds.
	SaturationDetector *FlowControlDetectorRef `json:"saturationDetector,omitempty"`
	// EnableEviction is upstream's in-flight eviction, which the reference does not implement: it
	// must be false.
	EnableEviction bool `json:"enableEviction,omitempty"`
}

// FlowControlDetectorRef is flowControl.saturationDetector.
type FlowControlDetectorRef struct {
	// PluginRef names a plugin of Plugins that is a saturation detector.
	PluginRef string `json:"pluginRef,omitempty"`
}

// PriorityBandConfig configures one priority band (upstream PriorityBandConfig).
type PriorityBandConfig struct {
	// Priority is the band's priority; higher is dispatched first.
	Priority int `json:"priority"`
	// MaxBytes and MaxRequests are the band's queue capacity; omitted or 0 = the default (1G,
	// 5000).
	MaxBytes    *resource.Quantity `json:"maxBytes,omitempty"`
	MaxRequests *resource.Quantity `json:"maxRequests,omitempty"`
	// FairnessPolicyRef and OrderingPolicyRef name the band's policies; only the defaults
	// (global-strict-fairness-policy, fcfs-ordering-policy) exist in the reference.
	FairnessPolicyRef string `json:"fairnessPolicyRef,omitempty"`
	OrderingPolicyRef string `json:"orderingPolicyRef,omitempty"`
}

// BandLimits are a band's resolved capacity.
type BandLimits struct {
	MaxRequests int64
	MaxBytes    int64
}

// FlowControlEnabled reports whether the flowControl feature gate is listed.
func (c *EndpointPickerConfig) FlowControlEnabled() bool {
	return c != nil && slices.Contains(c.FeatureGates, FlowControlFeatureGate)
}

// RequestTTL is the resolved defaultRequestTTL (0 = no bound).
func (f *FlowControlConfig) RequestTTL() time.Duration {
	if f == nil || f.DefaultRequestTTL == nil {
		return DefaultRequestTTL
	}
	return f.DefaultRequestTTL.Duration
}

// GlobalLimits are the resolved maxRequests and maxBytes (0 = unlimited).
func (f *FlowControlConfig) GlobalLimits() BandLimits {
	if f == nil {
		return BandLimits{}
	}
	return BandLimits{MaxRequests: quantity(f.MaxRequests), MaxBytes: quantity(f.MaxBytes)}
}

// Band returns the limits of the band for priority: its priorityBands entry, else the template
// for its sign, with 0 meaning the default.
func (f *FlowControlConfig) Band(priority int) BandLimits {
	var b *PriorityBandConfig
	if f != nil {
		for i := range f.PriorityBands {
			if f.PriorityBands[i].Priority == priority {
				b = &f.PriorityBands[i]
			}
		}
		if b == nil && priority < 0 && f.DefaultNegativePriorityBand != nil {
			b = f.DefaultNegativePriorityBand
		}
		if b == nil {
			b = f.DefaultPriorityBand
		}
	}
	out := BandLimits{MaxRequests: DefaultBandMaxRequests, MaxBytes: DefaultBandMaxBytes}
	if b != nil {
		if v := quantity(b.MaxRequests); v > 0 {
			out.MaxRequests = v
		}
		if v := quantity(b.MaxBytes); v > 0 {
			out.MaxBytes = v
		}
	}
	return out
}

func quantity(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}

// validate checks the section; errors start with the field path (flowControl.…).
func (f *FlowControlConfig) validate() error {
	checkQ := func(path string, q *resource.Quantity) error {
		if q != nil && q.Sign() < 0 {
			return fmt.Errorf("%s: must be ≥ 0, got %s", path, q.String())
		}
		return nil
	}
	checkBand := func(path string, b *PriorityBandConfig) error {
		if err := checkQ(path+".maxBytes", b.MaxBytes); err != nil {
			return err
		}
		if err := checkQ(path+".maxRequests", b.MaxRequests); err != nil {
			return err
		}
		if b.FairnessPolicyRef != "" && b.FairnessPolicyRef != DefaultFairnessPolicy {
			return fmt.Errorf("%s.fairnessPolicyRef: %q is not implemented by the reference (only %q)", path, b.FairnessPolicyRef, DefaultFairnessPolicy)
		}
		if b.OrderingPolicyRef != "" && b.OrderingPolicyRef != DefaultOrderingPolicy {
			return fmt.Errorf("%s.orderingPolicyRef: %q is not implemented by the reference (only %q)", path, b.OrderingPolicyRef, DefaultOrderingPolicy)
		}
		return nil
	}
	if err := checkQ("flowControl.maxBytes", f.MaxBytes); err != nil {
		return err
	}
	if err := checkQ("flowControl.maxRequests", f.MaxRequests); err != nil {
		return err
	}
	if f.DefaultRequestTTL != nil && f.DefaultRequestTTL.Duration < 0 {
		return fmt.Errorf("flowControl.defaultRequestTTL: must be ≥ 0 (0s = no bound), got %s", f.DefaultRequestTTL)
	}
	if f.DefaultPriorityBand != nil {
		if err := checkBand("flowControl.defaultPriorityBand", f.DefaultPriorityBand); err != nil {
			return err
		}
	}
	if f.DefaultNegativePriorityBand != nil {
		if err := checkBand("flowControl.defaultNegativePriorityBand", f.DefaultNegativePriorityBand); err != nil {
			return err
		}
	}
	seen := map[int]int{}
	for i := range f.PriorityBands {
		path := fmt.Sprintf("flowControl.priorityBands[%d]", i)
		if j, dup := seen[f.PriorityBands[i].Priority]; dup {
			return fmt.Errorf("%s.priority: duplicate priority %d (also flowControl.priorityBands[%d])", path, f.PriorityBands[i].Priority, j)
		}
		seen[f.PriorityBands[i].Priority] = i
		if err := checkBand(path, &f.PriorityBands[i]); err != nil {
			return err
		}
	}
	if f.UsageLimitPolicyPluginRef != "" {
		return fmt.Errorf("flowControl.usageLimitPolicyPluginRef: %q: the reference has only the default static policy (ceiling 1.0); leave it empty", f.UsageLimitPolicyPluginRef)
	}
	if f.EnableEviction {
		return fmt.Errorf("flowControl.enableEviction: in-flight eviction is not implemented by the reference; leave it false")
	}
	return nil
}
