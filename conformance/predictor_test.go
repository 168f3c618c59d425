package conformance

import "testing"

func TestNeedsPredictorSidecar(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tests []ConformanceTest
		want  bool
	}{
		{"none", nil, false},
		{"EPP only", []ConformanceTest{{ShortName: "a"}, {ShortName: "b", Features: []Feature{FeatureQueueAwareness}}}, false},
		{"predicted latency", []ConformanceTest{{ShortName: "a"}, {ShortName: "b", Features: []Feature{FeaturePredictedLatency}}}, true},
		{"shedding", []ConformanceTest{{ShortName: "c", Features: []Feature{FeatureRequestShedding}}}, true},
	} {
		if got := NeedsPredictorSidecar(tc.tests); got != tc.want {
			t.Errorf("%s: NeedsPredictorSidecar = %v, want %v", tc.name, got, tc.want)
		}
	}
}
