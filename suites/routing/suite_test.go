// Package routing_test is the local end-to-end suite of the reference EPP's routing: the
// reference EPP (reference/eppserver with static discovery and the real metrics collector) runs
// in process against a fleet of four fake vLLM servers (fakes/fleet) whose metrics are pinned
// through /admin/config "fake-metrics", and a scripted ext_proc client
// (fakes/gateway/extprocclient) plays the gateway.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=routing ./suites/routing
//
// Seeds (the EPP's --seed and the prompts' nonces) come from ginkgo's --seed
// (GinkgoRandomSeed) unless EPPKIT_SEED is set; a failing spec prints its seed and the command
// that reproduces it.
package routing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/vllm"
	"github.com/eppkit/eppkit/reference/datalayer"
	"github.com/eppkit/eppkit/reference/discovery"
	"github.com/eppkit/eppkit/reference/eppserver"
)

// Names, sizes and bounds of the suite.
const (
	// suiteLabel selects the suite with --label-filter.
	suiteLabel = "routing"
	// baseModel is the fakes' base model (GIE's sim-deployment.yaml).
	baseModel = "meta-llama/Llama-3.1-8B-Instruct"
	// fleetSize is the number of fake model servers in the pool.
	fleetSize = 4
	// scrapeInterval is the EPP's --refresh-metrics-interval.
	scrapeInterval = 50 * time.Millisecond
	// scrapeTimeout bounds one scrape. A failed scrape makes an endpoint stale at once, and the
	// stale filter then drops it, so on a loaded machine (-race, shared cores) the data layer's
	// default (10 intervals) would turn slow answers into routing noise.
	scrapeTimeout = 3 * time.Second
	// staleThreshold is the EPP's --stale-threshold; generous for a shared machine.
	staleThreshold = 5 * time.Second
	// waitTimeout bounds every wait for a server or a condition.
	waitTimeout = 20 * time.Second
	// sheddableObjective is the InferenceObjective given priority -1 (sheddable) in the static
	// discovery source.
	sheddableObjective = "batch"
	// rpcTimeout bounds one ext_proc exchange.
	rpcTimeout = 10 * time.Second
)

func TestRouting(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Reference EPP routing suite")
}

var _ = ginkgo.JustAfterEach(func() {
	if ginkgo.CurrentSpecReport().Failed() {
		seed := testseed.Seed()
		ginkgo.GinkgoWriter.Println(testseed.Repro{Seed: seed, Suite: "routing", LabelFilter: suiteLabel,
			Focus: ginkgo.CurrentSpecReport().LeafNodeText, Race: true})
	}
})

// env is one running pool + EPP + gateway client.
type env struct {
	fleet     *fleet.Fleet
	server    *eppserver.Server
	collector *datalayer.Collector
	client    *extprocclient.Client
}

// startEnv starts the fleet, pins every member's waiting queue to queues[i] and starts the
// reference EPP over it; it returns once the EPP is SERVING and has scraped the pinned queues.
func startEnv(queues [fleetSize]int) *env {
	ginkgo.GinkgoHelper()
	ginkgo.By("starting a fleet of fake vLLM servers")
	base := vllm.DefaultConfig()
	base.Model = baseModel
	base.Seed = testseed.Seed()
	f, err := fleet.Start(fleet.Options{Count: fleetSize, Base: base})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(f.Close)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	gomega.Expect(f.WaitHealthy(ctx)).To(gomega.Succeed())

	ginkgo.By(fmt.Sprintf("pinning the waiting queues to %v", queues))
	for i, m := range f.Members() {
		pinQueue(m, queues[i])
	}

	ginkgo.By("starting the reference EPP in process")
	addrs := make([]string, fleetSize)
	for i, m := range f.Members() {
		addrs[i] = m.Addr()
	}
	src, err := discovery.NewStatic(addrs, map[string]int{sheddableObjective: -1})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	logger := slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
	col, err := datalayer.New(datalayer.Config{Interval: scrapeInterval, StaleThreshold: staleThreshold, Timeout: scrapeTimeout,
		Names: datalayer.DefaultMetricNames(), Logger: logger})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	eppCtx, eppCancel := context.WithCancel(context.Background())
	srv, err := eppserver.Start(eppCtx, eppserver.Options{Discovery: src, Collector: col, GRPCAddr: "127.0.0.1:0",
		Seed: testseed.Seed(), Logger: logger})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() {
		eppCancel()
		gomega.Expect(srv.Wait()).To(gomega.Succeed())
	})

	ginkgo.By("waiting until the EPP is ready and has scraped the pinned queues")
	hc, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(hc.Close)
	gomega.Eventually(func(g gomega.Gomega) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(resp.GetStatus()).To(gomega.Equal(healthpb.HealthCheckResponse_SERVING))
		for i, a := range addrs {
			m := col.Metrics(a)
			g.Expect(m).NotTo(gomega.BeNil(), "no metrics for %s yet", a)
			g.Expect(m.WaitingQueueSize).To(gomega.Equal(queues[i]), "queue of %s", a)
		}
	}).WithTimeout(waitTimeout).WithPolling(20 * time.Millisecond).Should(gomega.Succeed())

	c, err := extprocclient.Dial(srv.GRPCAddr().String(), nil)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(c.Close)
	return &env{fleet: f, server: srv, collector: col, client: c}
}

// pinQueue pins a member's vllm:num_requests_waiting through POST /admin/config.
func pinQueue(m *fleet.Member, waiting int) {
	ginkgo.GinkgoHelper()
	body, err := json.Marshal(map[string]any{"fake-metrics": map[string]any{
		"waiting-requests": waiting, "running-requests": 0, "kv-cache-usage": 0.1}})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	resp, err := http.Post(m.URL()+"/admin/config", "application/json", bytes.NewReader(body))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "POST /admin/config: %s", out)
}

// openStream opens an ext_proc stream closed at cleanup.
func (e *env) openStream() *extprocclient.Stream {
	ginkgo.GinkgoHelper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.client.Open(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() { s.Close(); cancel() })
	return s
}

// completion builds a completions request whose prompt starts with a unique nonce, so that no
// two requests share a prefix block.
func completion(nonce string, extra map[string]string) extprocclient.Request {
	body, _ := json.Marshal(map[string]any{"model": baseModel, "max_tokens": 4,
		"prompt": nonce + " tell me about the weather in a city you like, in two sentences."})
	return extprocclient.Request{
		Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gateway.local", body, extra),
		Body:    body,
	}
}
