package discovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/eppkit/eppkit/conformance/endpointsource/apiserver"
	"github.com/eppkit/eppkit/reference/discovery"
)

func TestLeaseName(t *testing.T) {
	// llm-d-router v0.10.0 pkg/epp/server/controller_manager.go NewDefaultManager.
	if got := discovery.LeaseName("prod", "llama"); got != "epp-prod-llama.llm-d.ai" {
		t.Fatalf("LeaseName = %q", got)
	}
}

// TestLeaderElectionHandsOver runs two replicas' elections against a real kube-apiserver: one
// leads and holds the Lease epp-<ns>-<pool>.llm-d.ai under its identity; when its campaign ends
// (SIGTERM) it releases the lease and the other leads within a retry period or two.
func TestLeaderElectionHandsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := apiserver.StartControlPlane(ctx, apiserver.ControlPlaneOptions{})
	if errors.Is(err, apiserver.ErrBinariesMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	const retry = 200 * time.Millisecond
	newLE := func() *discovery.LeaderElection {
		le, err := discovery.NewLeaderElection(discovery.ElectionConfig{RestConfig: cp.RestConfig, Namespace: "default", Pool: "p",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: retry})
		if err != nil {
			t.Fatal(err)
		}
		return le
	}
	a, b := newLE(), newLE()
	actx, stopA := context.WithCancel(ctx)
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	if err := a.Start(actx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a leads", a.IsLeader)
	if err := b.Start(bctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * retry)
	if b.IsLeader() {
		t.Fatal("both replicas lead")
	}
	lease, err := cp.Clientset.CoordinationV1().Leases("default").Get(ctx, "epp-default-p.llm-d.ai", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := *lease.Spec.HolderIdentity; h != a.Identity() {
		t.Fatalf("lease holder %q, want the leader %q", h, a.Identity())
	}
	stopped := time.Now()
	stopA()
	<-a.Done()
	if a.IsLeader() {
		t.Fatal("a leads after its campaign ended")
	}
	waitFor(t, 10*retry, "b leads after a released the lease", b.IsLeader)
	t.Logf("b leads %v after a's campaign ended (retry period %v; without the release it would wait out the 3s lease)",
		time.Since(stopped).Round(time.Millisecond), retry)
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: not %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
