package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
)

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "DrainFinishesInFlight",
		Description: "An EPP asked to shut down (SIGTERM, as Kubernetes deletes its pod) lets the streams it is serving run to " +
			"their end: every response in flight reaches the client whole, [DONE] included.",
		Level:    conformance.LevelUpstream,
		Profile:  conformance.ProfileEPPRouting,
		Features: []conformance.Feature{conformance.FeatureHighAvailability},
		Preconditions: []string{"the EPP serves the pool's base model",
			"a target the harness starts replicas of and can signal (command, reference)",
			"a drain timeout of the EPP longer than the streams (about 2 s; upstream's default 30 s)"},
		Source: "llm-d-router v0.10.0 cmd/epp/runner/runner.go runWithGracefulShutdown (ext_proc keeps serving for --drain-timeout, " +
			"then GracefulStop \"drains in-flight streams\"); test/e2e/disruption_test.go (streaming request not hung when the EPP goes)",
		Run: runDrainFinishesInFlight,
	})
}

// drainStreamTokens and drainInterToken make each stream of the drain tests last about 2 s.
const (
	drainStreamTokens = 40
	drainInterToken   = "50ms"
)

// slowStream is a streamed chat completion in flight through a gateway.
type slowStream struct {
	resp *http.Response
	body *bufio.Reader
	err  error
}

// startSlowStreams makes every fake of the pool stream a token every drainInterToken (restored
// in Cleanup), sends n streamed chat completions through h and returns once each has delivered
// its first event: from then on they are in flight.
func startSlowStreams(t harness.TestingT, s *harness.Suite, h http.Handler, n int) (*httptest.Server, []*slowStream) {
	t.Helper()
	for _, a := range s.Endpoints() {
		s.SetLatency(t, a, map[string]any{"inter-token-latency": drainInterToken})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := s.Rand(t)
	out := make([]*slowStream, n)
	for i := range out {
		body, _ := json.Marshal(map[string]any{"model": s.ModelName, "stream": true, "max_tokens": drainStreamTokens, "ignore_eos": true,
			"messages": []map[string]string{{"role": "user", "content": uniquePrompt(s, t, r, 8)}}})
		ss := &slowStream{}
		out[i] = ss
		ss.resp, ss.err = http.Post(srv.URL+pathChat, "application/json", bytes.NewReader(body))
		if ss.err != nil {
			t.Fatalf("stream %d: %v", i, ss.err)
		}
		t.Cleanup(func() { _ = ss.resp.Body.Close() })
		if ss.resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(ss.resp.Body)
			t.Fatalf("stream %d: status %d before the drain: %.200s", i, ss.resp.StatusCode, b)
		}
		ss.body = bufio.NewReader(ss.resp.Body)
		if _, err := ss.body.ReadBytes('\n'); err != nil {
			t.Fatalf("stream %d: no first event: %v", i, err)
		}
	}
	return srv, out
}

// finish reads the rest of the stream within bound and reports whether it ended with [DONE].
func (ss *slowStream) finish(bound time.Duration) (rest []byte, err error) {
	done := make(chan struct{})
	go func() {
		rest, err = io.ReadAll(ss.body)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		_ = ss.resp.Body.Close()
		<-done
		return rest, fmt.Errorf("not ended %v after the drain began", bound)
	}
	if err == nil && !strings.Contains(string(rest), "data: [DONE]") {
		err = fmt.Errorf("ended without data: [DONE] (%d more bytes)", len(rest))
	}
	return rest, err
}

func runDrainFinishesInFlight(t harness.TestingT, s *harness.Suite) {
	if why := s.ReplicasUnsupported(false); why != "" {
		harness.Skip(t, "%s", why)
	}
	rs := s.StartReplicas(t, 1, false)
	rep := rs.Members[0]
	harness.MustEventually(t, s, s.Timeouts.TargetReady.D(), 1, func() error {
		if !rep.Serving(context.Background(), "readiness") && !rep.Serving(context.Background(), harness.ExtProcHealthService) {
			return fmt.Errorf("replica not ready (%s)", rs)
		}
		return nil
	})
	_, streams := startSlowStreams(t, s, rep.Gateway(t), 2)
	if err := rep.Terminate(); err != nil {
		t.Fatalf("SIGTERM the EPP: %v", err)
	}
	sigterm := time.Now()
	bound := 2*s.Timeouts.Request.D() + 5*time.Second
	for i, ss := range streams {
		if _, err := ss.finish(bound); err != nil {
			t.Fatalf("stream %d, in flight when the EPP got SIGTERM: %v\n--- replica log ---\n%s", i, err, rep.LogTail(15))
		}
	}
	t.Logf("2 streams (%d tokens, one every %s) in flight at SIGTERM both ended whole, %v after it",
		drainStreamTokens, drainInterToken, time.Since(sigterm).Round(time.Millisecond))
}
