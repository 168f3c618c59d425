// Package conformancecontrol proves the conformance tests can fail: it runs the registry against
// the reference EPP twice — with a config that has every scorer the routing features need (every
// test must pass) and with manifests/epp-configs/random-picker.yaml, a uniform random picker that
// still speaks the protocol (the EPP and Reference profiles must pass; PrefixCacheAffinity,
// QueueAwareness, KVCacheAwareness, LoRAAffinity and PredictedLatency must fail, each with its statistical
// message). A test that passes against the random picker could not tell a scheduler from a coin.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter=conformance-control ./suites/conformancecontrol
//
// Environment: EPPKIT_SEED (seed), EPPKIT_BIN (a prebuilt eppkit binary instead of building one).
package conformancecontrol_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/eppkit/eppkit/conformance"
	_ "github.com/eppkit/eppkit/conformance/tests" // registers the tests
)

// suiteLabel selects this suite.
const suiteLabel = "conformance-control"

func TestConformanceControl(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "eppkit conformance negative control suite")
}

// mustFailWithRandomPicker are the tests a uniform random picker must fail (SPEC §6 (b)).
var mustFailWithRandomPicker = []string{"KVCacheAwareness", "LoRAAffinity", "PredictedLatency", "PrefixCacheAffinity", "QueueAwareness"}

// failsWithoutLatencyPlugins are the non-statistical tests the random-picker config fails because
// it has no predicted-latency plugins: nothing parses x-slo-* headers (SPEC §4.1), and no
// PrepareData producer calls the predictor sidecar, so ReferencePrepareDataBudget never sees the
// "predicted-latency" profile it waits for before stalling the producer (SPEC §1.1).
var failsWithoutLatencyPlugins = []string{"ReferenceMalformedSLOHeader400", "ReferencePrepareDataBudget"}

var bin string

// configPath returns manifests/epp-configs/<name> from the module root.
func configPath(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "manifests", "epp-configs", name)
}

var _ = ginkgo.BeforeSuite(func() {
	bin = os.Getenv("EPPKIT_BIN")
	if bin == "" {
		var err error
		bin, err = gexec.Build("github.com/eppkit/eppkit/cmd/eppkit")
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "build the eppkit binary")
		ginkgo.DeferCleanup(gexec.CleanupBuildArtifacts)
	}
})

// runRegistry starts a harness around the reference EPP with configFile and runs every test of
// every profile with every feature claimed; it returns the outcome per ShortName.
func runRegistry(ctx context.Context, configFile string) map[string]conformance.TestResult {
	ginkgo.By("starting the reference EPP with " + filepath.Base(configFile))
	target, err := conformance.NewCommandTarget("reference", conformance.ReferenceCommand)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	s := testseed.Seed()
	timeouts := conformance.DefaultTimeoutConfig()
	if filepath.Base(configFile) == "random-picker.yaml" {
		// A random picker never learns: PredictedLatency measures after the warm-up bound, so a
		// short bound only saves time (the verdict comes from the measurement that follows).
		timeouts.PredictorWarmup = conformance.Duration(15 * time.Second)
	}
	suite, err := conformance.StartHarness(ctx, conformance.HarnessConfig{
		Target: target, Source: conformance.StaticSource{}, Eppkit: bin, ConfigFile: configFile,
		LogDir: ginkgo.GinkgoT().TempDir(), Timeouts: timeouts, Seed: s,
		Logger: slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, nil)),
	})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "start the harness (seed %d)", s)
	defer suite.Close()
	ginkgo.By(fmt.Sprintf("running the registry (seed %d)", s))
	r := conformance.Runner{Suite: suite, Progress: ginkgo.GinkgoWriter, Selection: conformance.Selection{
		Profiles: conformance.Profiles, SupportedFeatures: conformance.AllFeatures}}
	out := map[string]conformance.TestResult{}
	for _, res := range r.Run(conformance.All()) {
		out[res.Test.ShortName] = res
	}
	ginkgo.DeferCleanup(func() {
		if ginkgo.CurrentSpecReport().Failed() {
			ginkgo.AddReportEntry("reproduce", fmt.Sprintf("EPPKIT_SEED=%d go run github.com/onsi/ginkgo/v2/ginkgo --label-filter=%s ./suites/conformancecontrol", s, suiteLabel))
		}
	})
	return out
}

// expectedWithStaticSource is every test passing, except the tests that cannot run over the
// static source this suite uses (EndpointChurn needs a pool that changes), which skip.
func expectedWithStaticSource() map[string]conformance.Outcome {
	want := map[string]conformance.Outcome{}
	for _, ct := range conformance.All() {
		want[ct.ShortName] = conformance.Passed
		if slices.Contains(ct.Features, conformance.FeatureEndpointChurn) {
			want[ct.ShortName] = conformance.Skipped
		}
	}
	return want
}

// outcomes maps ShortName to outcome, for comparisons with readable diffs.
func outcomes(results map[string]conformance.TestResult) map[string]conformance.Outcome {
	out := map[string]conformance.Outcome{}
	for name, res := range results {
		out[name] = res.Outcome
	}
	return out
}

var _ = ginkgo.Describe("Conformance tests as a detector", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("the reference EPP runs with every scorer the routing features need", func() {
		ginkgo.It("should pass every test", func(ctx context.Context) {
			results := runRegistry(ctx, configPath("conformance.yaml"))
			want := expectedWithStaticSource()
			gomega.Expect(outcomes(results)).To(gomega.BeComparableTo(want), func() string { return failures(results) })
		}, ginkgo.NodeTimeout(conformance.DefaultTimeoutConfig().TestTimeout.D()*4))
	})

	ginkgo.When("the reference EPP runs a uniform random picker without scorers", func() {
		ginkgo.It("should fail exactly the statistical routing tests, each with n, the observed rate and the bound", func(ctx context.Context) {
			results := runRegistry(ctx, configPath("random-picker.yaml"))
			want := expectedWithStaticSource()
			for _, name := range append(slices.Clone(mustFailWithRandomPicker), failsWithoutLatencyPlugins...) {
				want[name] = conformance.Failed
			}
			gomega.Expect(outcomes(results)).To(gomega.BeComparableTo(want), func() string { return failures(results) })
			for _, name := range mustFailWithRandomPicker {
				msg := results[name].Message
				gomega.Expect(msg).To(gomega.ContainSubstring("statistical rule violated"), name)
				gomega.Expect(msg).To(gomega.MatchRegexp(`observed \d+ of \d+ .*n=\d+, pass iff`), name)
				gomega.Expect(msg).To(gomega.ContainSubstring("P(pass|random)="), name)
			}
		}, ginkgo.NodeTimeout(conformance.DefaultTimeoutConfig().TestTimeout.D()*4))
	})
})

// failures lists the messages of failed tests for a failure report.
func failures(results map[string]conformance.TestResult) string {
	var b strings.Builder
	for name, res := range results {
		if res.Outcome == conformance.Failed {
			fmt.Fprintf(&b, "%s: %s\n", name, res.Message)
		}
	}
	return b.String()
}
