package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Helpers of the request-surface tests (SPEC §9.1): bodies of every API and prompt form, and the
// check that a request was routed with its body intact.

// Paths of the APIs of SPEC §9.1 beyond completions and chat.
const (
	pathEmbeddings = "/v1/embeddings"
	pathMessages   = "/v1/messages"
	pathResponses  = "/v1/responses"
)

// jsonBody marshals a request body (maps and slices of plain values always marshal).
func jsonBody(v map[string]any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// apiBody is a request body for s.ModelName with fields base, then extra, merged in.
func apiBody(model string, base, extra map[string]any) []byte {
	m := map[string]any{"model": model}
	for _, part := range []map[string]any{base, extra} {
		for k, v := range part {
			m[k] = v
		}
	}
	return jsonBody(m)
}

// surfaceRequest is an ext_proc POST of body to path.
func surfaceRequest(path string, body []byte, extra map[string]string) extprocclient.Request {
	return extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", path, authority, body, extra), Body: body}
}

// mustRouteIntact fails the test unless the EPP routed req (mustRoute) and forwarded its body
// unchanged: either it returned no body mutation (the gateway forwards the original), or the body
// it returned is the sent one as JSON (key order and white space may differ), with
// Content-Length, when set, equal to the returned body's length. It returns the pick.
func mustRouteIntact(t harness.TestingT, s *harness.Suite, d *extprocclient.Decision, req extprocclient.Request) []string {
	t.Helper()
	addrs := mustRoute(t, s, d, req)
	if d.Body == nil {
		return addrs
	}
	var sent, got any
	if err := json.Unmarshal(req.Body, &sent); err != nil {
		t.Fatalf("test bug: the sent body is not JSON: %v", err)
	}
	if err := json.Unmarshal(d.Body, &got); err != nil {
		t.Fatalf("%s: the body the EPP returned is not JSON: %v (%d bytes)", describe(req), err, len(d.Body))
	}
	if diff := cmp.Diff(sent, got); diff != "" {
		t.Fatalf("%s: the EPP changed the body it forwards (-sent +forwarded):\n%s", describe(req), diff)
	}
	if d.ContentLength != "" && d.ContentLength != strconv.Itoa(len(d.Body)) {
		t.Fatalf("%s: Content-Length %q, forwarded body %d bytes", describe(req), d.ContentLength, len(d.Body))
	}
	return addrs
}

// routeForms exchanges every (name, path, body) case on its own stream and requires each to be
// routed intact; then it sends each through the gateway to the fleet and requires the model
// server's 200 (the fake vLLM serves every API and form of SPEC §9.1, as vLLM does). It logs the
// picks.
func routeForms(t harness.TestingT, s *harness.Suite, cases []surfaceCase) {
	t.Helper()
	c := s.ExtProc(t)
	for _, tc := range cases {
		req := surfaceRequest(tc.path, tc.body, nil)
		d := exchange(t, s, c, req)
		if d.Immediate != nil {
			t.Fatalf("%s: the EPP refused a valid %s request with %d: %s", tc.name, tc.path, d.Immediate.Status, d.Immediate.Body)
		}
		addrs := mustRouteIntact(t, s, d, req)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
		res, err := s.Gateway.Do(ctx, &gateway.Request{Method: http.MethodPost, Path: tc.path,
			Headers: map[string]string{"content-type": "application/json"}, Body: tc.body})
		cancel()
		switch {
		case err != nil:
			t.Fatalf("%s: POST %s through the gateway: %v", tc.name, tc.path, err)
		case res.Immediate:
			t.Fatalf("%s: POST %s through the gateway: the EPP refused it with %d: %s", tc.name, tc.path, res.Status, strings.TrimSpace(string(res.Body)))
		case res.Status != http.StatusOK || res.Endpoint == "":
			t.Fatalf("%s: POST %s through the gateway: status %d from %q: %s", tc.name, tc.path, res.Status, res.Endpoint, strings.TrimSpace(string(res.Body)))
		}
		t.Logf("%s: routed to %v over ext_proc; through the gateway served by %s (200)", tc.name, addrs, res.Endpoint)
	}
}

// surfaceCase is one request of a request-surface test.
type surfaceCase struct {
	name, path string
	body       []byte
}

// tokenIDs returns n token ids derived from seed (deterministic, below 50,000 like a real
// vocabulary's).
func tokenIDs(seed uint64, n int) []int {
	out := make([]int, n)
	x := seed | 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = int(x % 50000)
	}
	return out
}

// fmtIDs is a short description of a token-id prompt for logs.
func fmtIDs(ids []int) string {
	if len(ids) <= 4 {
		return fmt.Sprint(ids)
	}
	return fmt.Sprintf("[%d %d … %d] (%d ids)", ids[0], ids[1], ids[len(ids)-1], len(ids))
}
