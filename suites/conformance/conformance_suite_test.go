// Package conformance_test runs the conformance registry (conformance.All) as a Ginkgo suite: one
// It per registered test, under a Describe per profile, labelled with the profile, the features
// and the level, so `--label-filter` selects by any of them. It runs against the reference EPP
// (the eppkit binary built by gexec from ./cmd/eppkit) with every feature claimed; the CLI
// `eppkit conformance` is the user-facing runner over the same registry and skip rules.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter=conformance ./suites/conformance
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter='conformance && EPP' ./suites/conformance
//
// Environment: EPPKIT_SEED (seed), EPPKIT_ENDPOINT_SOURCE (static | apiserver, default static),
// EPPKIT_CONFIG_FILE (an EndpointPickerConfig for the reference; default
// manifests/epp-configs/conformance.yaml, every feature the reference claims in one config, since
// every feature is claimed), EPPKIT_BIN (a prebuilt eppkit
// binary instead of building one), EPPKIT_TIMEOUT_CONFIG (TimeoutConfig YAML).
package conformance_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"

	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"

	"github.com/eppkit/eppkit/conformance"
	_ "github.com/eppkit/eppkit/conformance/tests" // registers the tests
)

// suiteLabel selects this suite.
const suiteLabel = "conformance"

// defaultConfigFile is the reference's config when EPPKIT_CONFIG_FILE is unset (relative to this
// package's directory, where ginkgo runs the suite).
const defaultConfigFile = "../../manifests/epp-configs/conformance.yaml"

func TestConformance(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "eppkit conformance suite")
}

// suite is the harness shared by every spec; started once in BeforeSuite.
var suite *conformance.Suite

// selection claims every profile and feature: the reference EPP claims them all.
var selection = conformance.Selection{Profiles: conformance.Profiles, SupportedFeatures: conformance.TestedFeatures()}

var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	bin := os.Getenv("EPPKIT_BIN")
	if bin == "" {
		var err error
		bin, err = gexec.Build("github.com/eppkit/eppkit/cmd/eppkit")
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "build the eppkit binary")
		ginkgo.DeferCleanup(gexec.CleanupBuildArtifacts)
	}
	timeouts, err := conformance.LoadTimeoutConfig(os.Getenv("EPPKIT_TIMEOUT_CONFIG"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	sourceName := os.Getenv("EPPKIT_ENDPOINT_SOURCE")
	if sourceName == "" {
		sourceName = "static"
	}
	source, err := conformance.NewEndpointSource(sourceName)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	target, err := conformance.NewCommandTarget("reference", conformance.ReferenceCommand)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	configFile := os.Getenv("EPPKIT_CONFIG_FILE")
	if configFile == "" {
		configFile = defaultConfigFile
	}
	seed := testseed.Seed()
	suite, err = conformance.StartHarness(context.Background(), conformance.HarnessConfig{
		Target: target, Source: source, Eppkit: bin, ConfigFile: configFile,
		LogDir: ginkgo.GinkgoT().TempDir(), Timeouts: timeouts, Seed: seed,
		Logger: slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, nil)),
	})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "start the harness (seed %d)", seed)
	ginkgo.DeferCleanup(suite.Close)
}, ginkgo.NodeTimeout(conformance.DefaultTimeoutConfig().TargetReady.D()*3))

// The spec tree: built from the registry when the suite's tree is constructed.
var _ = func() bool {
	byProfile := map[conformance.Profile][]conformance.ConformanceTest{}
	for _, ct := range conformance.All() {
		byProfile[ct.Profile] = append(byProfile[ct.Profile], ct)
	}
	for _, p := range conformance.Profiles {
		tests := byProfile[p]
		ginkgo.Describe("Profile "+string(p), ginkgo.Label(suiteLabel), func() {
			for _, ct := range tests {
				labels := append([]string{suiteLabel}, conformance.Labels(ct)...)
				ginkgo.It(ct.ShortName+": "+ct.Description, ginkgo.Label(labels...), func() {
					if reason := selection.SkipReason(ct); reason != "" {
						ginkgo.Skip(reason)
					}
					ginkgo.DeferCleanup(func() {
						if ginkgo.CurrentSpecReport().Failed() {
							ginkgo.AddReportEntry("reproduce", fmt.Sprintf(
								"seed %d; EPPKIT_SEED=%d go run github.com/onsi/ginkgo/v2/ginkgo --focus=%q ./suites/conformance (or: %s)",
								suite.Seed, suite.Seed, ct.ShortName, conformance.RunAloneCommand(ct)))
						}
					})
					ct.Run(ginkgo.GinkgoT(), suite)
				})
			}
		})
	}
	return true
}()
