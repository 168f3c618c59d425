package extproc_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/eppkit/eppkit/reference/extproc"
)

// fakeProcessStream is an ExternalProcessor_ProcessServer fed from a script, recording what the
// server sends, on a context the test controls.
type fakeProcessStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   []*extprocv3.ProcessingRequest
	sent []*extprocv3.ProcessingResponse
}

func (f *fakeProcessStream) Context() context.Context { return f.ctx }
func (f *fakeProcessStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(f.in) == 0 {
		return nil, io.EOF
	}
	m := f.in[0]
	f.in = f.in[1:]
	return m, nil
}
func (f *fakeProcessStream) Send(r *extprocv3.ProcessingResponse) error {
	f.sent = append(f.sent, r)
	return nil
}

// TestCancelledStreamGetsNoImmediateResponse: when the gateway's stream context is cancelled
// (client gone) while the request is scheduled, the server sends no ImmediateResponse 500 and
// logs the cancellation at debug instead of a refusal.
func TestCancelledStreamGetsNoImmediateResponse(t *testing.T) {
	f := newFixture(t)
	var logs bytes.Buffer
	srv := extproc.NewServer(f.d, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := reqHeaders("/v1/models")
	h[":method"] = "GET"
	stream := &fakeProcessStream{ctx: ctx, in: []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(h), EndOfStream: true}}}}}
	if err := srv.Process(stream); err != nil {
		t.Fatalf("Process: %v", err)
	}
	for _, r := range stream.sent {
		if im := r.GetImmediateResponse(); im != nil {
			t.Fatalf("sent an ImmediateResponse %d (%s) to a cancelled stream", im.GetStatus().GetCode(), im.GetBody())
		}
	}
	if out := logs.String(); strings.Contains(out, "request refused") || !strings.Contains(out, "level=DEBUG msg=\"ext_proc: request cancelled") {
		t.Fatalf("logs %q: want a debug line about the cancellation and no refusal", out)
	}
	// Plugin state is not checked here: with a context cancelled before PrepareData, the
	// PrepareData goroutine of test-hooks may write its key after EndRequest (a framework race,
	// reported separately); the TTL sweep removes it.
}
