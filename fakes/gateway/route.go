package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
)

// Backend is one InferencePool behind a Route: the Gateway that asks that pool's EPP and
// forwards to that pool's endpoints, and the backend's weight (an HTTPRoute backendRef's weight).
type Backend struct {
	// Name names the backend in results ("pool-a").
	Name string
	// Weight is the share of requests the backend gets (≥ 0; 0 = only as a failover target).
	Weight int
	// Gateway serves the backend's requests with its own EPP.
	Gateway *Gateway
}

// RouteConfig configures NewRoute.
type RouteConfig struct {
	// Backends are the route's InferencePools; at least one, with a positive total weight.
	Backends []Backend
	// Retries is how many more backends a failed request may try (route-level failover, Envoy's
	// retry_policy num_retries); 0 means none.
	Retries int
	// Seed seeds the weighted choice.
	Seed uint64
}

// Route is an HTTPRoute rule whose backendRefs are several InferencePools, each with its own
// EPP (GIE conformance GatewayWeightedAcrossTwoInferencePools): every request goes to a backend
// chosen by weight, whose EPP picks the endpoint; when the attempt fails in a way a data plane
// retries (an EPP refusal 503, a local reply 5xx: the EPP or the endpoint unreachable), the
// request is tried again on another backend, chosen by weight among those not tried, and that
// backend's EPP is asked: as GIE proposal 004 requires since GIE v1.6.0 (PR #3003), a failover to
// another InferencePool invokes "the EPP associated with the newly selected backend and MUST NOT
// reuse endpoints returned for the previous backend", and the served endpoint is reported to the
// EPP of the backend that produced the terminal response (each backend's Gateway reports to its
// own EPP). How a route chooses among backends beyond that is not part of the protocol; this is
// Envoy's weighted_clusters with a retry that reselects.
type Route struct {
	cfg RouteConfig
	mu  sync.Mutex
	rnd *rand.Rand
}

// Attempt is one try of a request on one backend.
type Attempt struct {
	// Backend is the backend's name.
	Backend string
	// Result is what that backend's gateway answered (nil with Err).
	Result *Result
	// Err is the gateway's error (a cancelled context, an aborted response).
	Err error
}

// RouteResult is a request's attempts, the last one being the client's answer.
type RouteResult struct {
	Attempts []Attempt
}

// Final is the last attempt: what the client saw.
func (r *RouteResult) Final() Attempt { return r.Attempts[len(r.Attempts)-1] }

// NewRoute validates cfg.
func NewRoute(cfg RouteConfig) (*Route, error) {
	if len(cfg.Backends) == 0 {
		return nil, errors.New("gateway route: no backends")
	}
	total := 0
	for i, b := range cfg.Backends {
		switch {
		case b.Gateway == nil:
			return nil, fmt.Errorf("gateway route: backend %d (%s) has no Gateway", i, b.Name)
		case b.Weight < 0:
			return nil, fmt.Errorf("gateway route: backend %s weight %d < 0", b.Name, b.Weight)
		}
		total += b.Weight
	}
	if total == 0 {
		return nil, errors.New("gateway route: every backend weighs 0")
	}
	if cfg.Retries < 0 {
		return nil, fmt.Errorf("gateway route: Retries %d < 0", cfg.Retries)
	}
	return &Route{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x726f757465))}, nil
}

// Retryable reports whether a data plane retries an attempt on another backend: its gateway
// failed, or answered 503 (an EPP with no eligible endpoint in its pool) or a local reply 5xx
// (the EPP or the picked endpoint unreachable).
func Retryable(a Attempt) bool {
	if a.Err != nil {
		return !errors.Is(a.Err, context.Canceled) && !errors.Is(a.Err, context.DeadlineExceeded)
	}
	switch {
	case a.Result.Status == http.StatusServiceUnavailable:
		return true
	case a.Result.Status >= 500 && a.Result.Endpoint == "":
		return true // a local reply: nothing reached a model server
	}
	return false
}

// pick chooses a backend by weight among those not in tried; -1 when none is left. Backends of
// weight 0 are chosen only when every weighted one was tried.
func (r *Route) pick(tried map[int]bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	for i, b := range r.cfg.Backends {
		if !tried[i] {
			total += b.Weight
		}
	}
	if total == 0 {
		for i := range r.cfg.Backends {
			if !tried[i] {
				return i
			}
		}
		return -1
	}
	n := r.rnd.IntN(total)
	for i, b := range r.cfg.Backends {
		if tried[i] {
			continue
		}
		if n < b.Weight {
			return i
		}
		n -= b.Weight
	}
	return -1
}

// Do sends req to a backend chosen by weight and, while an attempt is Retryable and retries
// remain, to another one.
func (r *Route) Do(ctx context.Context, req *Request) *RouteResult {
	out := &RouteResult{}
	tried := map[int]bool{}
	for {
		i := r.pick(tried)
		if i < 0 {
			return out
		}
		tried[i] = true
		b := r.cfg.Backends[i]
		res, err := b.Gateway.Do(ctx, req)
		a := Attempt{Backend: b.Name, Result: res, Err: err}
		if err != nil {
			a.Result = nil
		}
		out.Attempts = append(out.Attempts, a)
		if !Retryable(a) || len(out.Attempts) > r.cfg.Retries {
			return out
		}
	}
}
