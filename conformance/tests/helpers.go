// Package tests holds eppkit's conformance tests, one file per test, each registering a
// conformance.ConformanceTest from init(). Import it for its side effect:
//
//	import _ "github.com/eppkit/eppkit/conformance/tests"
//
// This file holds the helpers the tests share: request bodies, ext_proc exchanges that fail the
// test with what was expected and what was seen, and pick checks. Every wait is bounded by
// s.Timeouts; every random choice comes from s.Rand(t), whose seed the runner prints.
package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// Paths of the OpenAI API the tests send.
const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
	// authority is the :authority the tests send (any host works for an EPP).
	authority = "eppkit-conformance"
)

// variantPods is the number of pods of a fleet variant's pool (harness.FleetVariant): as many
// as the run's default fleet, so its statistical plan is the main fleet's.
const variantPods = harness.DefaultFleetSize

// chatBody is a chat completion request for model with one user message, max_tokens 1 (the
// routing tests do not need long answers).
func chatBody(model, prompt string) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": 1,
	})
	return b
}

// completionBody is a completions request for model with prompt; extra fields (such as
// "cache_salt") are added to the object.
func completionBody(model, prompt string, extra map[string]any) []byte {
	m := map[string]any{"model": model, "prompt": prompt, "max_tokens": 1}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// chatRequest is an ext_proc request carrying a chat completion for prompt; hint is the subset
// hint (nil = none).
func chatRequest(s *harness.Suite, prompt string, hint []string) extprocclient.Request {
	body := chatBody(s.ModelName, prompt)
	return extprocclient.Request{
		Headers:    extprocclient.RequestHeaders("POST", pathChat, authority, body, nil),
		Body:       body,
		SubsetHint: hint,
	}
}

// uniquePrompt returns a prompt that shares no prefix-cache block with any other prompt of the
// run: it starts with 16 random hex characters from r, then the test's nonce, then words.
func uniquePrompt(s *harness.Suite, t harness.TestingT, r *rand.Rand, words int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%016x %s", r.Uint64(), s.Nonce(t))
	for i := 0; i < words; i++ {
		b.WriteByte(' ')
		b.WriteString(vocabulary[r.IntN(len(vocabulary))])
	}
	return b.String()
}

// vocabulary feeds random prompts.
var vocabulary = strings.Fields(`the a model server request token cache prefix block endpoint queue
	pool gateway picker score filter latency adapter prompt answer decode prefill memory batch
	stream metric ready serving weight random seed value shape order chunk header body route`)

// testContext returns a context bounded by the whole-test timeout, cancelled in Cleanup.
func testContext(t harness.TestingT, s *harness.Suite) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.TestTimeout.D())
	t.Cleanup(cancel)
	return ctx
}

// openStream opens an ext_proc stream on c bounded by the test's context; it is closed in
// Cleanup. It fails the test when the stream cannot be opened.
func openStream(t harness.TestingT, s *harness.Suite, c *extprocclient.Client) *extprocclient.Stream {
	t.Helper()
	st, err := c.Open(testContext(t, s))
	if err != nil {
		t.Fatalf("open an ext_proc stream to %s: %v", s.TargetAddress, err)
	}
	t.Cleanup(st.Close)
	return st
}

// exchange runs the request phases of req on a new stream of c (one stream per HTTP request, as
// Envoy does), closes the stream, and returns the EPP's answer; it fails the test on a stream
// error, a timeout or a protocol violation.
func exchange(t harness.TestingT, s *harness.Suite, c *extprocclient.Client, req extprocclient.Request) *extprocclient.Decision {
	t.Helper()
	d, err := tryExchange(s, c, req)
	if err != nil {
		t.Fatalf("ext_proc exchange with %s (%s): %v%s", s.TargetAddress, describe(req), err, streamErrorHint(err))
	}
	return d
}

// streamErrorHint explains an exchange that the EPP ended with a gRPC error status: a gateway
// cannot forward that as a refusal.
func streamErrorHint(err error) string {
	st, ok := status.FromError(errors.Unwrap(err))
	if !ok {
		st, ok = status.FromError(err)
	}
	if !ok || st.Code() == codes.OK || st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled {
		return ""
	}
	return fmt.Sprintf(" (the EPP ended the stream with gRPC status %s instead of answering: Envoy turns a stream error into "+
		"its status_on_error, 500 by default, so a refusal must be an ImmediateResponse with its HTTP status, e.g. 503 when no "+
		"endpoint is eligible)", st.Code())
}

// exchangeOn is exchange on an open stream.
func exchangeOn(t harness.TestingT, s *harness.Suite, st *extprocclient.Stream, req extprocclient.Request) *extprocclient.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	d, err := st.Exchange(ctx, req)
	if err != nil {
		t.Fatalf("ext_proc exchange with %s (%s): %v%s", s.TargetAddress, describe(req), err, streamErrorHint(err))
	}
	return d
}

// describe summarises a request for failure messages.
func describe(req extprocclient.Request) string {
	var method, path string
	for _, h := range req.Headers {
		switch h.Key {
		case ":method":
			method = h.Value
		case ":path":
			path = h.Value
		}
	}
	out := fmt.Sprintf("%s %s, %d body bytes", method, path, len(req.Body))
	if req.SubsetHint != nil {
		out += fmt.Sprintf(", subset hint %q", req.SubsetHint)
	}
	return out
}

// mustRoute fails the test unless the EPP answered with a pick (no ImmediateResponse) that
// satisfies the protocol (see pickProblem); it returns the pick's addresses.
func mustRoute(t harness.TestingT, s *harness.Suite, d *extprocclient.Decision, req extprocclient.Request) []string {
	t.Helper()
	if d.Immediate != nil {
		t.Fatalf("EPP refused a valid request (%s) with ImmediateResponse %d: %s", describe(req), d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body)))
	}
	addrs, problem := pickProblem(s, d)
	if problem != "" {
		t.Fatalf("%s (%s)", problem, describe(req))
	}
	return addrs
}

// pickProblem checks GIE proposal 004's rules on the pick: it is set as the header
// x-gateway-destination-endpoint and/or the dynamic metadata envoy.lb /
// x-gateway-destination-endpoint; each value set is a non-empty comma list of ip:port, each an
// endpoint of the pool; when both are set they are equal. It returns the addresses and "" or the
// problem, naming which value (header or metadata) is wrong and what was expected.
func pickProblem(s *harness.Suite, d *extprocclient.Decision) ([]string, string) {
	h, m := d.PickHeader, d.PickMetadata
	headerName := "the header " + extprocclient.DestinationKey
	metadataName := "the dynamic metadata " + extprocclient.DestinationNamespace + "/" + extprocclient.DestinationKey
	if h == "" && m == "" {
		return nil, fmt.Sprintf("EPP returned no pick: neither %s nor %s is set", headerName, metadataName)
	}
	pool := s.Endpoints()
	// Each value on its own first, so the message says which one is malformed.
	for _, v := range []struct{ name, value, other, otherName string }{{headerName, h, m, metadataName}, {metadataName, m, h, headerName}} {
		if v.value == "" {
			continue
		}
		if bad := pickFormatProblem(v.value, pool); bad != "" {
			msg := fmt.Sprintf("EPP pick in %s = %q: %s", v.name, v.value, bad)
			if v.other != "" && pickFormatProblem(v.other, pool) == "" {
				msg += fmt.Sprintf(" (%s = %q is well-formed)", v.otherName, v.other)
			}
			return splitPick(v.value), msg + "; the protocol requires <ip:port>[,<ip:port>...] of ready pool endpoints " +
				fmt.Sprintf("%v in each value the EPP sets", pool)
		}
	}
	if h != "" && m != "" && !samePick(h, m) {
		return nil, fmt.Sprintf("EPP returned two different picks: %s = %q, %s = %q (the protocol: \"The EPP MUST not set two different values\")",
			headerName, h, metadataName, m)
	}
	return splitPick(d.Pick()), ""
}

// pickFormatProblem checks one pick value: a non-empty comma list of ip:port, each a pool
// endpoint; "" when it is.
func pickFormatProblem(pick string, pool []string) string {
	addrs := splitPick(pick)
	if len(addrs) == 0 {
		return "it holds no address"
	}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			if net.ParseIP(a) != nil {
				return fmt.Sprintf("%q has no port (an IP alone is not <ip:port>)", a)
			}
			return fmt.Sprintf("%q is not ip:port: %v", a, err)
		}
		if net.ParseIP(host) == nil {
			return fmt.Sprintf("%q: %q is not an IP address", a, host)
		}
		if port == "" {
			return fmt.Sprintf("%q has an empty port", a)
		}
		if !slices.Contains(pool, a) {
			return fmt.Sprintf("%s is not a ready endpoint of the pool", a)
		}
	}
	return ""
}

// samePick reports whether two pick values name the same addresses in the same order (spaces
// around commas do not count).
func samePick(a, b string) bool { return slices.Equal(splitPick(a), splitPick(b)) }

// splitPick splits a comma list of addresses, trimming spaces and dropping empty items.
func splitPick(pick string) []string {
	var out []string
	for _, a := range strings.Split(pick, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// hostOf returns the IP of ip:port (the input when it has no port).
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// requireLoopbackFleet fails the test when fleet members share one IP (the 127.0.0.1
// distinct-port fallback): rules that match endpoints by IP cannot be told apart there.
func requireLoopbackFleet(t harness.TestingT, s *harness.Suite) {
	t.Helper()
	if !s.DistinctIPs() {
		t.Fatalf("precondition: this test needs fleet members on distinct IPs (127.0.10.x); this host fell back to distinct ports on 127.0.0.1, where matching by IP cannot tell endpoints apart")
	}
}

// requireEndpoints fails the test unless the pool has at least n endpoints.
func requireEndpoints(t harness.TestingT, s *harness.Suite, n int) []string {
	t.Helper()
	pool := s.Endpoints()
	if len(pool) < n {
		t.Fatalf("precondition: this test needs a pool of at least %d endpoints, the harness has %d", n, len(pool))
	}
	return pool
}

// mustTrials is harness.DeterministicTrials that fails the test on an error, and logs m.
func mustTrials(t harness.TestingT, chance float64, what string) int {
	t.Helper()
	m, err := harness.DeterministicTrials(chance)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Logf("%d trials: a picker that %s only by chance (p=%.4g per trial) passes all with probability %.3g ≤ %g",
		m, what, chance, pow(chance, m), harness.MaxFalsePass)
	return m
}

func pow(x float64, n int) float64 {
	out := 1.0
	for i := 0; i < n; i++ {
		out *= x
	}
	return out
}

// tryExchange is exchange that returns errors instead of failing the test (for cleanups and
// polling); the stream is closed before it returns.
func tryExchange(s *harness.Suite, c *extprocclient.Client, req extprocclient.Request) (*extprocclient.Decision, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	st, err := c.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Exchange(ctx, req)
}
