package tests

import (
	"math/rand/v2"
	"strconv"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// engineSeriesEngines is the number of data-parallel engines behind each pod's one port in
// EngineSeriesSummed.
const engineSeriesEngines = 3

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName:   "EngineSeriesSummed",
		FormerNames: []string{"ReferenceEngineSeriesSummed"}, // in the Reference profile until issue 32
		Description: "A model server that serves several data-parallel engines behind one port (vLLM's internal load balancing: " +
			"one series per engine, labelled engine=\"0\"..\"N-1\") MUST be one endpoint whose waiting queue is the sum over its " +
			"engines: with a deep queue (≥ 20) on one engine other than the first and every other engine idle, it receives at " +
			"most 5% of new requests.",
		Level:    conformance.LevelEppkit,
		Profile:  conformance.ProfileEPPProduction,
		Features: []conformance.Feature{conformance.FeatureEngineSeriesAggregation},
		Preconditions: []string{
			"the harness starts a second pool of " + strconv.Itoa(variantPods) + " fakes with --data-parallel-size " +
				strconv.Itoa(engineSeriesEngines) + " --data-parallel-mode internal (current names, engine-labelled series) and " +
				"its own instance of the EPP (the run's config): the reference and command targets; the address and cluster targets skip",
			"the EPP scrapes vllm:num_requests_waiting and is queue-aware (e.g. queue-scorer)",
			"the EPP observes new metrics within metricsPropagation",
		},
		// Upstream v1.5.0 keeps one series per family (getLatestMetric: the latest timestamp, in
		// practice the first); summing the engines is eppkit's (reference/datalayer).
		Source: "SPEC §7.1 data parallelism as engine-labelled series; GIE #2950 (the EPP ignores every engine but one); vLLM " +
			"vllm/v1/metrics/loggers.py (per-engine series labelled engine); upstream v1.5.0 pkg/epp/backend/metrics/metrics.go getLatestMetric",
		Run: runEngineSeriesSummed,
	})
}

func runEngineSeriesSummed(t harness.TestingT, s *harness.Suite) {
	if why := s.SidePoolUnsupported(); why != "" {
		harness.Skip(t, "%s", why)
	}
	pool := s.StartVariantPool(t, harness.FleetVariant{Name: "engines", Pods: variantPods,
		Configure: func(_ int, c *vllm.Config) {
			c.DPSize = engineSeriesEngines
			c.DataParallelMode = vllm.DataParallelInternal
		}})
	t.Logf("pool of %d servers with %d engines each behind one port: %v", variantPods, engineSeriesEngines, pool.Endpoints())
	runLoadedEndpointAvoided(t, pool, "the deep queue on one engine", queueRuleRate, func(r *rand.Rand, isLoaded bool) vllm.FakeMetrics {
		engines := make([]vllm.EngineGauges, engineSeriesEngines)
		for i := range engines {
			engines[i] = vllm.EngineGauges{RunningRequests: 1, KVCacheUsage: 0.1}
		}
		if isLoaded {
			// Never engine 0: an EPP that reads only the first series sees an idle server.
			engines[1+r.IntN(engineSeriesEngines-1)].WaitingRequests = int64(queueDeep + r.IntN(10))
		}
		return vllm.FakeMetrics{RunningRequests: 1, KVCacheUsage: 0.1, Engines: engines}
	})
}
