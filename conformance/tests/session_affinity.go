package tests

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
)

// sessionTokenHeader carries the session token both ways (llm-d-router v0.10.0
// pkg/epp/framework/plugins/scheduling/util/sessionaffinity/header.go DefaultHeader).
const sessionTokenHeader = "x-session-token"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "SessionAffinity",
		Description: "Every response MUST carry a session token in x-session-token; a request that sends back the token of the " +
			"previous response MUST be served by the same endpoint while that endpoint is a candidate, and when it is not (outside " +
			"the request's subset hint, or removed from the pool) the request MUST still be routed and its response's token " +
			"MUST then pin later requests to the endpoint that served it.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureSessionAffinity},
		Preconditions: []string{"the EPP runs session-affinity-filter (or -scorer with a weight that decides) with strategy " +
			"encoded_endpoint_header and the default header x-session-token in the profile of requests without SLO headers " +
			"(llm-d-router: --allow-experimental-plugins, the plugins are Alpha)",
			"with the apiserver source the test also removes the session's endpoint from the pool"},
		Source: "SPEC §10 (llm-d-router v0.10.0 pkg/epp/framework/plugins/scheduling/filter/sessionaffinity/encoded_endpoint_header.go, " +
			"scorer/sessionaffinity, util/sessionaffinity/header.go WriteResponseHeader; test/integration/epp/session_affinity_test.go)",
		Run: runSessionAffinity,
	})
}

// sessionSend sends one completion through the gateway with the session token (none when "")
// and the subset hint, and returns the serving endpoint and the response's token.
func sessionSend(t harness.TestingT, s *harness.Suite, body []byte, token string, hint []string) (endpoint, next string) {
	t.Helper()
	hdr := map[string]string{"content-type": "application/json"}
	if token != "" {
		hdr[sessionTokenHeader] = token
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: pathCompletions, Headers: hdr, Body: body, SubsetHint: hint})
	switch {
	case err != nil:
		t.Fatalf("POST %s with %s %q: %v", pathCompletions, sessionTokenHeader, token, err)
	case res.Status != http.StatusOK || res.Endpoint == "":
		t.Fatalf("POST %s with %s %q (hint %v): status %d from %q: %s", pathCompletions, sessionTokenHeader, token, hint, res.Status, res.Endpoint, strings.TrimSpace(string(res.Body)))
	}
	next = res.Headers.Get(sessionTokenHeader)
	if next == "" {
		t.Fatalf("the response served by %s carries no %s (response headers %v)", res.Endpoint, sessionTokenHeader, res.Headers)
	}
	return res.Endpoint, next
}

// stickTo sends plan.N requests, each with the token the previous response returned, starting
// from token, and checks with plan that the session's endpoint served them. It returns the last
// token.
func stickTo(t harness.TestingT, s *harness.Suite, plan harness.Plan, home, token, phase string) string {
	t.Helper()
	r := s.Rand(t)
	hits := 0
	var away []string
	for i := 0; i < plan.N; i++ {
		ep, next := sessionSend(t, s, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), token, nil)
		if ep == home {
			hits++
		} else {
			away = append(away, ep)
		}
		token = next
	}
	t.Logf("%s: %d of %d requests carrying the session token served by %s (others: %v)", phase, hits, plan.N, home, away)
	if !plan.Check(t, s, hits, plan.N) {
		t.Fatalf("%s: the session did not stay on %s", phase, home)
	}
	return token
}

func runSessionAffinity(t harness.TestingT, s *harness.Suite) {
	pool := requireEndpoints(t, s, 3)
	r := s.Rand(t)
	plan := harness.MustPlan(t, harness.Shape{Outcome: "requests carrying the session token served by the session's endpoint",
		Tail: harness.AtLeast, Compliant: 1 - harness.Exploration, Random: 1 / float64(len(pool))})

	// A session starts: the first response names its endpoint.
	home, token := sessionSend(t, s, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), "", nil)
	t.Logf("session started on %s, token %q", home, token)
	token = stickTo(t, s, plan, home, token, "pinned")

	// The session's endpoint becomes ineligible for one request (outside its subset hint): the
	// request is routed inside the hint, and its token moves the session there.
	var hint []string
	for _, a := range pool {
		if a != home {
			hint = append(hint, a)
		}
	}
	moved, token := sessionSend(t, s, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), token, hint)
	if !slices.Contains(hint, moved) {
		t.Fatalf("a request with the session token and a subset hint %v without %s was served by %s", hint, home, moved)
	}
	t.Logf("the session's endpoint %s outside the subset hint: served by %s, new token %q", home, moved, token)
	token = stickTo(t, s, plan, moved, token, "moved")

	if !s.CanEditPool() {
		t.Logf("this endpoint source cannot change the pool: the removal part is not run")
		return
	}
	// The session's endpoint leaves the pool: requests with its token are served elsewhere.
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
	err := s.RemoveEndpoint(ctx, moved)
	cancel()
	if err != nil {
		t.Fatalf("remove %s from the pool: %v", moved, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.EndpointChange.D())
		defer cancel()
		if err := s.AddEndpoint(ctx, moved); err != nil {
			t.Errorf("cleanup: add %s back to the pool: %v", moved, err)
		}
	})
	var last string
	harness.MustEventually(t, s, s.Timeouts.EndpointChange.D(), 1, func() error {
		ep, next := sessionSend(t, s, completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil), token, nil)
		if ep == moved {
			return fmt.Errorf("the request with the session token still went to %s, which left the pool", moved)
		}
		last, token = ep, next
		return nil
	})
	t.Logf("%s left the pool: the session's next request was served by %s", moved, last)
	stickTo(t, s, plan, last, token, "after the removal")
}
