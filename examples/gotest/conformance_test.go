// Package gotest shows how an EPP implementer runs the eppkit conformance suite from their own
// `go test`, as gateway-api's RunConformanceWithOptions allows: conformance.RunTest starts the
// harness (fake vLLM fleet, fake gateway, endpoint source) around the EPP the options name, runs
// one subtest per conformance test and writes the same reports as `eppkit conformance`.
//
// Here the EPP is eppkit's reference EPP, started from a command template exactly as yours would
// be: replace Command with your EPP's command line (its fields are those of
// harness.TargetEnv: {{.GRPCPort}}, {{.HealthPort}}, {{.Endpoints}}, {{.Kubeconfig}}, ...), and
// the profiles and features with the ones you claim.
//
//	go test ./...                                  # every test, reports in out/
//	go test -run 'TestConformance/PrefixCacheAffinity' ./...
//	EPPKIT_ENDPOINT_SOURCE=apiserver go test ./... # discovery through a local kube-apiserver
//
// The eppkit binary (its predictor sidecar, and here the reference EPP) is built from the module
// in TestMain; EPPKIT_BIN names a prebuilt one instead.
package gotest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/target"
	_ "github.com/eppkit/eppkit/conformance/tests" // registers the conformance tests
)

// eppkitBin is the eppkit binary TestMain built (or EPPKIT_BIN).
var eppkitBin string

func TestMain(m *testing.M) {
	eppkitBin = os.Getenv("EPPKIT_BIN")
	if eppkitBin == "" {
		dir, err := os.MkdirTemp("", "eppkit-example-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		eppkitBin = filepath.Join(dir, "eppkit")
		if err := buildEppkit(eppkitBin); err != nil {
			fmt.Fprintln(os.Stderr, "build eppkit:", err)
			os.Exit(2)
		}
		code := m.Run()
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// buildEppkit builds cmd/eppkit of the eppkit module this module requires (the checkout, through
// the replace in go.mod; a released version from the module cache otherwise), in that module,
// so its own go.sum covers the CLI's dependencies.
func buildEppkit(out string) error {
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/eppkit/eppkit").Output()
	if err != nil {
		return fmt.Errorf("locate the eppkit module: %w", err)
	}
	build := exec.Command("go", "build", "-C", strings.TrimSpace(string(dir)), "-o", out, "./cmd/eppkit")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
}

func TestConformance(t *testing.T) {
	conformance.RunTest(t, conformance.Options{
		Target:         "command",
		Command:        target.ReferenceCommand, // your EPP's command template
		ConfigFile:     "../../manifests/epp-configs/conformance.yaml",
		EndpointSource: os.Getenv("EPPKIT_ENDPOINT_SOURCE"), // "" = static
		Profiles:       conformance.Profiles,                // EPP, EPP-Routing, EPP-Production, Reference
		AllFeatures:    true,                                // claim every feature that has tests
		Eppkit:         eppkitBin,
		LogDir:         "out/logs",
		ReportDir:      "out/reports",
		ResultsFile:    "out/results.json",
		Implementation: confv1.Implementation{Organization: "eppkit", Project: "reference-epp",
			URL: "https://github.com/eppkit/eppkit", Version: "example", Contact: []string{"https://github.com/eppkit/eppkit/issues"}},
	})
}
