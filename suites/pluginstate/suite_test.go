// Package pluginstate_test is the white-box suite for per-request plugin state across extension
// points (SPEC §1 "Plugin state", §2.3): the approx-prefix-cache-producer writes its request state
// during PrepareData, PreRequest indexes the pick from it even when no prefix scorer runs, the
// state is deleted on the normal path, abandoned state is swept after the TTL, and concurrent
// requests leave the store empty.
//
// Every check is a function that returns an error instead of asserting, so the suite can run the
// same checks against a faulty producer that writes its state only in Score — the upstream defect
// fixed by GIE PR #2005 (kubernetes-sigs/gateway-api-inference-extension#2005, "add preparedata
// plugin to latency based scorer to consume prefix states"; before it, a config without the
// prefix scorer in a profile logged "failed to read prefix plugin state: not found" and never
// indexed, see opendatahub-io/kserve#969) — and require them to fail there (negative control).
//
// Every spec builds a framework.Runtime from a config over the reference plugins
// (plugins.RegisterAll) plus the suite's own test plugins, on a fake clock.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --repeat=5 --label-filter=pluginstate ./suites/pluginstate
//
// Seeds come from ginkgo's --seed (GinkgoRandomSeed) unless EPPKIT_SEED is set; every spec prints
// its seed and the command that reproduces it on failure.
package pluginstate_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"
)

func TestPluginState(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Plugin state suite")
}

// repro is the failure annotation of a spec: the seed and the command that reruns it.
func repro(seed int64, spec string) string {
	return testseed.Repro{Seed: seed, Suite: "pluginstate", LabelFilter: "pluginstate", Focus: spec, Race: true}.String()
}

var _ = ginkgo.ReportAfterEach(func(r ginkgo.SpecReport) {
	if r.Failed() {
		fmt.Fprintf(os.Stderr, "pluginstate: %q failed; %s\n", r.LeafNodeText, repro(testseed.Seed(), r.LeafNodeText))
	}
})
