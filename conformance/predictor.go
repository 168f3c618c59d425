package conformance

// NeedsPredictorSidecar reports whether any of tests is gated by a predicted-latency feature
// (PredictedLatency, RequestShedding), the only tests whose targets are given {{.PredictorURL}}
// for a reason. Callers pass the tests that will run.
func NeedsPredictorSidecar(tests []ConformanceTest) bool {
	for _, ct := range tests {
		for _, f := range ct.Features {
			if f == FeaturePredictedLatency || f == FeatureRequestShedding {
				return true
			}
		}
	}
	return false
}
