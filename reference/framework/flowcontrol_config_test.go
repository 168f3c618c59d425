package framework

import (
	"strings"
	"testing"
	"time"
)

func TestFlowControlConfig(t *testing.T) {
	cfg, err := LoadConfig([]byte(`
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
flowControl:
  maxRequests: 1k
  defaultRequestTTL: 3s
  defaultNegativePriorityBand: {maxRequests: 2}
  priorityBands:
  - {priority: 10, maxRequests: "4", maxBytes: 1Mi}
`))
	if err != nil {
		t.Fatal(err)
	}
	fc := cfg.FlowControl
	if !cfg.FlowControlEnabled() || fc.RequestTTL() != 3*time.Second || fc.GlobalLimits().MaxRequests != 1000 || fc.GlobalLimits().MaxBytes != 0 {
		t.Errorf("enabled %v, ttl %v, global %+v", cfg.FlowControlEnabled(), fc.RequestTTL(), fc.GlobalLimits())
	}
	for p, want := range map[int]BandLimits{10: {4, 1 << 20}, 0: {DefaultBandMaxRequests, DefaultBandMaxBytes}, -1: {2, DefaultBandMaxBytes}} {
		if got := fc.Band(p); got != want {
			t.Errorf("Band(%d) = %+v, want %+v", p, got, want)
		}
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings %v", cfg.Warnings)
	}
	var none *FlowControlConfig
	if none.RequestTTL() != 60*time.Second || none.Band(3).MaxRequests != 5000 {
		t.Error("defaults")
	}
}

// TestFlowControlConfigErrors: a bad flow-control configuration fails at load naming the field.
func TestFlowControlConfigErrors(t *testing.T) {
	head := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\nplugins:\n- type: queue-scorer\n"
	for body, want := range map[string]string{
		"flowControl: {maxRequests: -3}":                                                        "flowControl.maxRequests: must be ≥ 0",
		"flowControl: {maxBytes: lots}":                                                         "flowControl",
		"flowControl: {defaultRequestTTL: -1s}":                                                 "flowControl.defaultRequestTTL",
		"flowControl: {defaultRequestTTL: soon}":                                                "flowControl",
		"flowControl: {priorityBands: [{priority: 1}, {priority: 1}]}":                          "flowControl.priorityBands[1].priority: duplicate priority 1",
		"flowControl: {priorityBands: [{priority: 1, maxRequests: -1}]}":                        "flowControl.priorityBands[0].maxRequests",
		"flowControl: {priorityBands: [{priority: 1, orderingPolicyRef: edf-ordering-policy}]}": "flowControl.priorityBands[0].orderingPolicyRef",
		"flowControl: {defaultPriorityBand: {fairnessPolicyRef: round-robin-fairness-policy}}":  "flowControl.defaultPriorityBand.fairnessPolicyRef",
		"flowControl: {usageLimitPolicyPluginRef: soft}":                                        "flowControl.usageLimitPolicyPluginRef",
		"flowControl: {enableEviction: true}":                                                   "flowControl.enableEviction",
		"flowControl: {saturationDetector: {pluginRef: nope}}":                                  "flowControl.saturationDetector.pluginRef",
		"flowControl: {priorityBand: []}":                                                       `unknown field "priorityBand"`,
	} {
		_, err := LoadConfig([]byte(head + body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", body, err, want)
		}
	}
	// Without the gate the section is checked, then ignored with a warning.
	cfg, err := LoadConfig([]byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nflowControl: {maxRequests: 5}\n"))
	if err != nil || cfg.FlowControlEnabled() || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "feature gate") {
		t.Errorf("gate off: %v, warnings %v", err, cfg.Warnings)
	}
}
