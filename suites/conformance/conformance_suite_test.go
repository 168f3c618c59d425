// Package conformance_test runs the conformance registry (conformance.All) as a Ginkgo suite: one
// It per registered test, under a Describe per profile, labelled with the profile, the features
// and the level, so `--label-filter` selects by any of them. It runs against the reference EPP
// (the eppkit binary built by gexec from ./cmd/eppkit) with every feature claimed, through the
// same run as `eppkit conformance` (conformance.Start / Session.RunOne / Session.Finish): the
// same runner, and the same ConformanceReport per profile, junit.xml and summary.md at the end.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter=conformance ./suites/conformance
//	go run github.com/onsi/ginkgo/v2/ginkgo --label-filter='conformance && EPP' ./suites/conformance
//
// Environment: EPPKIT_SEED (seed), EPPKIT_ENDPOINT_SOURCE (static | apiserver, default static),
// EPPKIT_CONFIG_FILE (an EndpointPickerConfig for the reference; default
// manifests/epp-configs/conformance.yaml, every feature the reference claims in one config, since
// every feature is claimed), EPPKIT_BIN (a prebuilt eppkit binary instead of building one),
// EPPKIT_TIMEOUT_CONFIG (TimeoutConfig YAML), EPPKIT_REPORT_OUTPUT (the reports' directory;
// default out/suites/conformance under the module root).
package conformance_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	_ "github.com/eppkit/eppkit/conformance/wiring" // the tests and the reference target
	"github.com/eppkit/eppkit/internal/testseed"
	"github.com/eppkit/eppkit/internal/version"
)

// suiteLabel selects this suite.
const suiteLabel = "conformance"

// moduleRoot is the repository root (this file is suites/conformance/conformance_suite_test.go).
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestConformance(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "eppkit conformance suite")
}

// session is the run shared by every spec; started in BeforeSuite, finished in AfterSuite.
var session *conformance.Session

var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	// envtest (the apiserver endpoint source) logs through controller-runtime's logger; without
	// one it prints a warning and a stack once the process is 30 s old (building eppkit below can
	// take that long on a loaded machine).
	ctrllog.SetLogger(ginkgo.GinkgoLogr)
	bin := os.Getenv("EPPKIT_BIN")
	if bin == "" {
		var err error
		bin, err = gexec.Build("github.com/eppkit/eppkit/cmd/eppkit")
		gomega.Expect(err).NotTo(gomega.HaveOccurred(), "build the eppkit binary")
		ginkgo.DeferCleanup(gexec.CleanupBuildArtifacts)
	}
	timeouts, err := harness.LoadTimeoutConfig(os.Getenv("EPPKIT_TIMEOUT_CONFIG"))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	configFile := os.Getenv("EPPKIT_CONFIG_FILE")
	if configFile == "" {
		configFile = filepath.Join(moduleRoot(), "manifests", "epp-configs", "conformance.yaml")
	}
	reportDir := os.Getenv("EPPKIT_REPORT_OUTPUT")
	if reportDir == "" {
		reportDir = filepath.Join(moduleRoot(), "out", "suites", "conformance")
	}
	seed := testseed.Seed()
	session, err = conformance.Start(context.Background(), conformance.Options{
		Target: "reference", EndpointSource: os.Getenv("EPPKIT_ENDPOINT_SOURCE"), Eppkit: bin, ConfigFile: configFile,
		AllFeatures: true, Timeouts: timeouts, Seed: seed, LogDir: ginkgo.GinkgoT().TempDir(),
		ReportDir: reportDir, Implementation: confv1.Implementation{Organization: "eppkit", Project: "reference-epp",
			URL: "https://github.com/eppkit/eppkit", Version: version.Version(), Contact: []string{"https://github.com/eppkit/eppkit/issues"}},
		Out: ginkgo.GinkgoWriter, Err: ginkgo.GinkgoWriter, Logger: slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, nil)),
	})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "start the harness (seed %d)", seed)
}, ginkgo.NodeTimeout(harness.DefaultTimeoutConfig().TargetReady.D()*3))

// AfterSuite writes the reports (every test the label filter left out is reported skipped) and
// stops the harness. Failed tests already failed their specs, so only a harness or report
// error fails here.
var _ = ginkgo.AfterSuite(func() {
	if session == nil {
		return
	}
	res, err := session.Finish()
	if ee, ok := err.(*conformance.ExitError); ok && ee.Code == conformance.ExitTestFailed {
		err = nil
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "write the reports")
	ginkgo.GinkgoWriter.Printf("reports: %v, %s, %s\n", res.Reports.Reports, res.Reports.JUnit, res.Reports.Summary)
})

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
					if reason := session.SkipReason(ct); reason != "" {
						ginkgo.Skip(reason)
					}
					res := session.RunOne(ct)
					ginkgo.GinkgoWriter.Print(res.Log)
					switch res.Outcome {
					case conformance.Skipped:
						ginkgo.Skip(res.Message)
					case conformance.Failed:
						ginkgo.AddReportEntry("reproduce", testseed.Repro{Seed: session.Seed(), Suite: "conformance", Focus: ct.ShortName}.String()+
							" (or: "+conformance.RunAloneCommand(ct)+")")
						ginkgo.Fail(res.Message)
					}
				})
			}
		})
	}
	return true
}()
