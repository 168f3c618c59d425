package extprocclient_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// An EPP that answers the request headers but never streams the body back stalls in the
// request_body phase; after Threshold such stalls in a row the StallWatch cuts later waits to
// Short for the rest of the run; an answer only clears Broken.
func TestStallWatchNamesTheUnansweredPhaseAndCutsRepeats(t *testing.T) {
	var streamBack atomic.Bool
	srv, err := extproctest.Start(extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		all := extproctest.PickResponses("10.0.0.1:8000", nil, seen.Body, 4, true)
		if streamBack.Load() {
			return all
		}
		return all[:1] // the headers only: the body chunks are never answered
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	c, err := extprocclient.Dial(srv.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	const full, short = 400 * time.Millisecond, 50 * time.Millisecond
	c.MessageTimeout = full
	c.Stalls = extprocclient.NewStallWatch(2, short)
	body := []byte(`{"model":"m","prompt":"0123456789"}`)
	req := extprocclient.Request{Headers: extprocclient.RequestHeaders("POST", "/v1/completions", "gw", body, nil), Body: body, ChunkSize: 10}
	exchange := func() (*extprocclient.StallError, time.Duration) {
		t.Helper()
		st, err := c.Open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		t0 := time.Now()
		_, err = st.Exchange(context.Background(), req)
		took := time.Since(t0)
		if err == nil {
			return nil, took
		}
		var se *extprocclient.StallError
		if !errors.As(err, &se) || !errors.Is(err, extprocclient.ErrMessageTimeout) {
			t.Fatalf("error %v: want a StallError wrapping ErrMessageTimeout", err)
		}
		return se, took
	}
	chunks := (len(body) + 9) / 10
	for i := 1; i <= 2; i++ {
		se, took := exchange()
		if se == nil {
			t.Fatalf("exchange %d: no error against an EPP that never streams the body back", i)
		}
		if se.Phase != extprocclient.PhaseRequestBody || se.Sent != chunks || se.Answered != 0 || se.Short || se.Stalls != i {
			t.Errorf("exchange %d: %+v, want request_body phase, %d sent, 0 answered, %d stalls, not short", i, se, chunks, i)
		}
		if took < full {
			t.Errorf("exchange %d took %v, want the full %v (the watch trips only after 2 stalls)", i, took, full)
		}
		if !strings.Contains(se.Error(), "none of the 4 request_body chunks") {
			t.Errorf("message %q does not say which chunks went unanswered", se.Error())
		}
	}
	se, took := exchange()
	if se == nil || !se.Short || se.Stalls != 3 {
		t.Fatalf("third exchange: %+v, want a short wait (3 stalls)", se)
	}
	if took >= full {
		t.Errorf("third exchange took %v, want about %v (cut short)", took, short)
	}
	if !strings.Contains(se.Error(), "unanswered 2 times before") {
		t.Errorf("message %q does not say why the wait was cut short", se.Error())
	}
	streamBack.Store(true)
	if broken, _ := c.Stalls.Broken(extprocclient.PhaseRequestBody); !broken {
		t.Errorf("Broken(request_body) false after three stalls")
	}
	streamBack.Store(true)
	if se, took := exchange(); se != nil || took >= short {
		t.Fatalf("exchange against a streaming EPP: %v after %v", se, took)
	}
	if broken, n := c.Stalls.Broken(extprocclient.PhaseRequestBody); broken || n != 3 || !c.Stalls.Tripped(extprocclient.PhaseRequestBody) {
		t.Errorf("after an answered body: Broken %v (%d stalls), Tripped %v; want not broken, still tripped",
			broken, n, c.Stalls.Tripped(extprocclient.PhaseRequestBody))
	}
}
