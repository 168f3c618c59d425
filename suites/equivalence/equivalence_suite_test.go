// Package equivalence_test is the white-box suite for SPEC §2.3's equivalence rule: for any
// sequence of requests, endpoints, metrics, filters and evictions, legacy-prefix-cache-scorer
// (the pre-split monolith, reference/plugins/legacyprefix) scores every endpoint exactly as
// prefix-cache-scorer does on approx-prefix-cache-producer's attribute
// (reference/plugins/prefix), and the two indexes hold the same hashes per endpoint after every
// PreRequest. Both pipelines are built from YAML through framework.NewRuntime.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=equivalence ./suites/equivalence
//
// Seeds come from ginkgo's --seed (GinkgoRandomSeed) unless EPPKIT_SEED is set; every failure
// prints the seed and the command that reproduces it.
package equivalence_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

func TestEquivalence(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Prefix-cache scorer equivalence suite")
}
