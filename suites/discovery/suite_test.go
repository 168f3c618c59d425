// Package discovery_test cross-checks two sides of the apiserver endpoint source against a real
// kube-apiserver v1.37.2 + etcd v3.6.11 (tools/k8s-v1.37.2): what conformance/endpointsource/apiserver writes
// (an InferencePool of gateway-api-inference-extension v1.5.0's CRD and Ready Pods carrying the
// fleet's IPs) is what the reference EPP's InferencePool discovery (reference/discovery) reads,
// including Pods turning not-Ready, deletions and additions (the EndpointChurn moves), and
// InferenceObjective priorities.
//
// One control plane serves the suite; every spec writes its own pool into its own namespace, so
// specs are independent and run in any order. The suite skips, saying which command builds them,
// when the binaries are not in the tools cache.
//
// Run it alone:
//
//	./bin/eppkit tools build k8s && ./bin/eppkit tools build gie --only crds
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=apiserver ./suites/discovery
package discovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
)

func TestDiscovery(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "InferencePool discovery against a real kube-apiserver")
}

// controlPlane is shared by the specs; nil when the binaries are missing (the suite is skipped).
var controlPlane *apiserver.ControlPlane

var _ = ginkgo.BeforeSuite(func(ctx context.Context) {
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		ginkgo.Skip("apiserver suite skipped: " + err.Error())
	}
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "start kube-apiserver + etcd")
	controlPlane = cp
	ginkgo.DeferCleanup(func() {
		if ginkgo.CurrentSpecReport().Failed() {
			ginkgo.GinkgoWriter.Println(cp.LogTail(40))
		}
		gomega.Expect(cp.Stop()).To(gomega.Succeed())
	})
}, ginkgo.NodeTimeout(3*time.Minute))

var _ = ginkgo.ReportAfterEach(func(r ginkgo.SpecReport) {
	if r.Failed() && controlPlane != nil {
		ginkgo.GinkgoWriter.Println(controlPlane.LogTail(20))
	}
})
