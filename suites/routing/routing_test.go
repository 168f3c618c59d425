package routing_test

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

var _ = ginkgo.Describe("Queue-aware picking", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("one endpoint has an empty waiting queue and the others 20", func() {
		ginkgo.It("should send every new unique-prompt request to the empty-queue endpoint", func() {
			r := rand.New(rand.NewPCG(uint64(testseed.Seed()), 1))
			idle := r.IntN(fleetSize)
			var queues [fleetSize]int
			for i := range queues {
				if i != idle {
					queues[i] = 20
				}
			}
			e := startEnv(queues)
			want := e.fleet.Member(idle).Addr()
			s := e.openStream()
			const n = 40
			ginkgo.By(fmt.Sprintf("sending %d requests with unique prompts; want every pick = %s (queues %v)", n, want, queues))
			for i := range n {
				ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
				d, err := s.Exchange(ctx, completion(fmt.Sprintf("nonce-%d-%d-%d", testseed.Seed(), i, r.Uint64()), nil))
				cancel()
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(d.Immediate).To(gomega.BeNil())
				gomega.Expect(d.PickHeader).To(gomega.Equal(d.PickMetadata), "header and metadata must be equal")
				gomega.Expect(d.Pick()).To(gomega.Equal(want), "request %d of %d", i+1, n)
			}
		})
	})
})

var _ = ginkgo.Describe("Error recovery on one ext_proc stream", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("a malformed body is followed by a valid request on the same stream", func() {
		ginkgo.It("should answer 400 with a JSON error and route the next request", func() {
			e := startEnv([fleetSize]int{0, 0, 0, 0})
			s := e.openStream()
			badBody := []byte(`{"model": "m", "prompt": `)
			bad := extprocclient.Request{Body: badBody,
				Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gateway.local", badBody, nil)}
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			d, err := s.Exchange(ctx, bad)
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			gomega.Expect(d.Immediate).NotTo(gomega.BeNil(), "want an ImmediateResponse")
			gomega.Expect(d.Immediate.Status).To(gomega.Equal(400))
			gomega.Expect(string(d.Immediate.Body)).To(gomega.MatchRegexp(`^\{"error":\{"message":".+","type":"BadRequest","code":400\}\}$`))

			pool := make([]string, fleetSize)
			for i, m := range e.fleet.Members() {
				pool[i] = m.Addr()
			}
			for i := range 3 {
				d, err := s.Exchange(ctx, completion(fmt.Sprintf("after-400-%d-%d", testseed.Seed(), i), nil))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(d.Immediate).To(gomega.BeNil(), "request %d after the 400 was refused", i+1)
				gomega.Expect(pool).To(gomega.ContainElement(d.Pick()))
			}
		})
	})
})

var _ = ginkgo.Describe("Request shedding", ginkgo.Label(suiteLabel), func() {
	ginkgo.When("every endpoint's waiting queue is above the saturation threshold", func() {
		ginkgo.It("should refuse sheddable requests with 429 and still route the others", func() {
			e := startEnv([fleetSize]int{20, 20, 20, 20})
			s := e.openStream()
			ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
			defer cancel()
			for i := range 5 {
				d, err := s.Exchange(ctx, completion(fmt.Sprintf("shed-%d-%d", testseed.Seed(), i),
					map[string]string{"x-gateway-inference-objective": sheddableObjective}))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(d.Immediate).NotTo(gomega.BeNil(), "sheddable request %d was routed to %s", i+1, d.Pick())
				gomega.Expect(d.Immediate.Status).To(gomega.Equal(429))

				d, err = s.Exchange(ctx, completion(fmt.Sprintf("keep-%d-%d", testseed.Seed(), i), nil))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(d.Immediate).To(gomega.BeNil(), "priority-0 request %d was refused", i+1)
			}
		})
	})
})
