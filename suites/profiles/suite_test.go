// Package profiles_test is the white-box suite of the reference EPP's profile handlers (SPEC §3):
// single-profile-handler, latency-fallback-profile-handler (falls back while the latency
// predictor is not ready, switches once it is) and disagg-profile-handler (decode always, prefill
// only when the uncached prompt exceeds nonCachedTokens, the prefill pick in
// x-prefiller-host-port), and the primary profile that x-eppkit-profile names.
//
// Every spec builds its own framework.Runtime from a config over the reference plugins, with a
// scriptable latency predictor (suites/internal/latencytest), so specs are independent.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=profiles ./suites/profiles
package profiles_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// suiteLabel selects this suite.
const suiteLabel = "profiles"

func TestProfiles(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "profile handlers suite")
}
