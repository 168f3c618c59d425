// Package predictedlatency_test is the white-box suite of predicted-latency routing (SPEC §4) in
// the reference EPP (reference/plugins/latency, reference/predictor): SLO headroom
// classification, the headroom tier filter and its exploration rate, the prefix-cache affinity
// filter, the latency scorer's strategies and negative-tier rules, the composite fallback when
// the predictor is down, erroring, slow or not ready, the PrepareData DAG edge to the prefix
// producer, training samples measured from scripted response streams, the latency SLO admitter,
// and the in-process predictor learning a synthetic linear law.
//
// Every spec builds its own framework.Runtime (or plugin) over a scriptable predictor
// (suites/internal/latencytest), with an injected clock where time matters, so specs are independent.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=predictedlatency ./suites/predictedlatency
//
// Seeds come from ginkgo's --seed unless EPPKIT_SEED is set; randomised specs print the seed and
// the command that reproduces them on failure.
package predictedlatency_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"
)

// suiteLabel selects this suite.
const suiteLabel = "predictedlatency"

func TestPredictedLatency(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "predicted-latency suite")
}

// repro is the failure annotation of a randomised spec.
func repro(seed int64) string {
	return testseed.Repro{Seed: seed, Suite: "predictedlatency", LabelFilter: suiteLabel,
		Focus: ginkgo.CurrentSpecReport().LeafNodeText, Race: true}.String()
}
