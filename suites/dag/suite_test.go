// Package dag_test is the white-box suite for the PrepareData dependency graph (SPEC §1.1) of the
// reference EPP's framework (reference/framework): which plugins are nodes, how they are ordered,
// which graphs are rejected and with what message, how missing producers are created, the layer
// rule, and how the executor runs the graph under the phase budget.
//
// Every spec builds a framework.Runtime from a config over test plugins registered into a fresh
// framework.Registry, so specs are independent and run in any order.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=dag ./suites/dag
//
// Seeds come from ginkgo's --seed (GinkgoRandomSeed) unless EPPKIT_SEED is set; every randomised
// spec prints its seed and the command that reproduces it on failure.
package dag_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"
)

func TestDAG(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "PrepareData DAG suite")
}

// repro is the failure annotation of a randomised spec: the seed and the command that reruns it.
func repro(seed int64) string {
	return testseed.Repro{Seed: seed, Suite: "dag", LabelFilter: "dag", Focus: ginkgo.CurrentSpecReport().LeafNodeText, Race: true}.String()
}
