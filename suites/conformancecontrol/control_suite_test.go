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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	_ "github.com/eppkit/eppkit/conformance/wiring" // the tests and the reference target
)

// suiteLabel selects this suite.
const suiteLabel = "conformance-control"

func TestConformanceControl(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "eppkit conformance negative control suite")
}

// mustFailWithRandomPicker are the statistical tests a uniform random picker must fail (SPEC §6
// (b)): the routing features', and the Reference tests that check prefix affinity for a request
// form (token ids, Anthropic Messages, multimodal parts, the trailing partial block) or a metric
// form (engine series summed, the legacy KV-cache name), each through a rate bound; and
// VLLMGRPCRouted, whose second part is prefix affinity for gRPC token-id prompts.
var mustFailWithRandomPicker = []string{"KVCacheAwareness", "LoRAAffinity", "PredictedLatency", "PrefixCacheAffinity", "QueueAwareness",
	"AnthropicMessagesRouted", "EngineSeriesSummed", "KVCacheLegacyMetricName",
	"MultimodalPrefixIdentity", "PartialBlockHashed", "TokenIDPrompts", "VLLMGRPCRouted"}

// failsWithRandomPickerByBurst are the tests a random picker fails by a bound that is not a rate
// over the whole run: DuplicateRequestIDIsolated fails when one burst of 64 repeats of a
// prompt loses ≥ 12 of them to other endpoints (a random picker keeps about a quarter home).
var failsWithRandomPickerByBurst = []string{"DuplicateRequestIDIsolated"}

// failsWithoutLatencyPlugins are the non-statistical tests the random-picker config fails because
// it has no predicted-latency plugins: nothing parses x-slo-* headers (SPEC §4.1), and no
// PrepareData producer calls the predictor sidecar, so ReferencePrepareDataBudget never sees the
// "predicted-latency" profile it waits for before stalling the producer (SPEC §1.1).
var failsWithoutLatencyPlugins = []string{"MalformedSLOHeader400", "ReferencePrepareDataBudget"}

// failsWithoutTheirPlugins are the non-statistical tests of issue 31 that the random-picker
// config fails because it has neither scorers nor a session-affinity plugin: every candidate
// scores 0, so EndpointScores never sees the loaded endpoint scored below the others; no response
// carries a session token (SessionAffinity); nothing reads the SLO or session headers, so their
// malformed values are not refused (ReferenceMalformedControlHeaders400); and, of issue 35, no
// precise-prefix-cache-producer subscribes to the fakes' KV events (PrecisePrefixCache).
var failsWithoutTheirPlugins = []string{"EndpointScores", "SessionAffinity", "ReferenceMalformedControlHeaders400", "PrecisePrefixCache"}

// skipsWithStaticSource are the tests that need a kube-apiserver and report themselves not
// applicable on the static source this suite uses: API groups (LLMDAPIGroup: the llm-d.ai and
// legacy InferenceObjectives), a lease for leader election (EPPReadinessOnlyOnLeader,
// LeaderFailover, DisruptionLeaderKilledUnderLoad), an endpoint marked not ready
// (EPPPoolFailoverScoped, EPPSubsetHintIneligible503, DisruptionModelServerDown) and a pool that
// appears after the EPP starts (EPPReadinessFollowsSync). Listed by name, not derived from the
// run, so a test that stops itself where it should run fails this suite.
var skipsWithStaticSource = []string{"LLMDAPIGroup", "EPPReadinessOnlyOnLeader", "LeaderFailover",
	"DisruptionLeaderKilledUnderLoad", "EPPPoolFailoverScoped", "EPPSubsetHintIneligible503",
	"DisruptionModelServerDown", "EPPReadinessFollowsSync"}

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

// runRegistry runs every test of every profile, with every feature claimed, against the
// reference EPP with configFile (conformance.Run, as `eppkit conformance`); it returns the
// outcome per ShortName.
func runRegistry(ctx context.Context, configFile string) map[string]conformance.TestResult {
	ginkgo.By("starting the reference EPP with " + filepath.Base(configFile))
	s := testseed.Seed()
	timeouts := harness.DefaultTimeoutConfig()
	if filepath.Base(configFile) == "random-picker.yaml" {
		// A random picker never learns: PredictedLatency measures after the warm-up bound, so a
		// short bound only saves time (the verdict comes from the measurement that follows).
		timeouts.PredictorWarmup = harness.Duration(15 * time.Second)
	}
	ginkgo.DeferCleanup(func() {
		if ginkgo.CurrentSpecReport().Failed() {
			ginkgo.AddReportEntry("reproduce", testseed.Repro{Seed: s, Suite: "conformancecontrol", LabelFilter: suiteLabel}.Command())
		}
	})
	ginkgo.By(fmt.Sprintf("running the registry (seed %d)", s))
	res, err := conformance.Run(ctx, conformance.Options{Target: "reference", Eppkit: bin, ConfigFile: configFile,
		Profiles: conformance.Profiles, SupportedFeatures: conformance.AllFeatures, Timeouts: timeouts, Seed: s,
		LogDir: ginkgo.GinkgoT().TempDir(), Out: ginkgo.GinkgoWriter, Err: ginkgo.GinkgoWriter,
		Logger: slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, nil))})
	var ee *conformance.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == conformance.ExitTestFailed) {
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "run the registry (seed %d)", s)
	}
	out := map[string]conformance.TestResult{}
	for _, r := range res.Tests {
		out[r.Test.ShortName] = r
	}
	return out
}

// expectedWithStaticSource is every test passing, except the tests that cannot run over the
// static source this suite uses (EndpointChurn needs a pool that changes; skipsWithStaticSource),
// which skip as not applicable.
func expectedWithStaticSource() map[string]conformance.Outcome {
	want := map[string]conformance.Outcome{}
	for _, ct := range conformance.All() {
		want[ct.ShortName] = conformance.Passed
		if slices.Contains(ct.Features, conformance.FeatureEndpointChurn) || slices.Contains(skipsWithStaticSource, ct.ShortName) {
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
			for _, name := range skipsWithStaticSource {
				gomega.Expect(results[name].Message).To(gomega.HavePrefix(harness.NotApplicablePrefix), name)
			}
		}, ginkgo.NodeTimeout(harness.DefaultTimeoutConfig().TestTimeout.D()*4))
	})

	ginkgo.When("the reference EPP runs a uniform random picker without scorers", func() {
		ginkgo.It("should fail exactly the statistical routing tests, each with n, the observed rate and the bound", func(ctx context.Context) {
			results := runRegistry(ctx, configPath("random-picker.yaml"))
			want := expectedWithStaticSource()
			for _, name := range slices.Concat(mustFailWithRandomPicker, failsWithRandomPickerByBurst, failsWithoutLatencyPlugins, failsWithoutTheirPlugins) {
				want[name] = conformance.Failed
			}
			gomega.Expect(outcomes(results)).To(gomega.BeComparableTo(want), func() string { return failures(results) })
			for _, name := range mustFailWithRandomPicker {
				msg := results[name].Message
				gomega.Expect(msg).To(gomega.ContainSubstring("statistical rule violated"), name)
				gomega.Expect(msg).To(gomega.MatchRegexp(`observed \d+ of \d+ .*n=\d+, pass iff`), name)
				gomega.Expect(msg).To(gomega.ContainSubstring("P(pass|random)="), name)
			}
		}, ginkgo.NodeTimeout(harness.DefaultTimeoutConfig().TestTimeout.D()*4))
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
