package eppserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/reference/eppserver"
	"github.com/eppkit/eppkit/reference/extproc"
)

// TestDrainWaitsForABodyArriving: a request whose headers and first body chunk arrived before
// SIGTERM, and whose body ends 3 s after the drain stopped admitting, is answered with the drain's
// 503 rejected-shutting-down; the server does not stop under it (it used to: such a request was
// not in flight, so the drain ended at once and the shutdown cut the stream after its 2 s grace,
// the client seeing Unavailable). A request that starts after admission stopped and never ends
// its body does not keep the server from stopping well before the 20 s drain timeout.
func TestDrainWaitsForABodyArriving(t *testing.T) {
	f := slowFleet(t, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, _ := startDrainServer(t, ctx, f, 20*time.Second, 0)
	conn, err := grpc.NewClient(srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer scancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := &corev3.HeaderMap{}
	for k, v := range map[string]string{":method": "POST", ":path": "/v1/completions", "content-type": "application/json"} {
		hdr.Headers = append(hdr.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	body := []byte(`{"model":"m","prompt":"a request whose body is still arriving at SIGTERM","max_tokens":2}`)
	send := func(m *extprocv3.ProcessingRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[:20]}}})
	eventually(t, 5*time.Second, func() error { return metricAtLeast(srv, "eppkit_epp_buffered_request_body_bytes", 20) })

	cancel() // SIGTERM; no handover: admission stops at once
	// Longer than the shutdown's grace for open streams (2 s), which used to cut this one.
	select {
	case <-srv.Done():
		t.Fatal("the server stopped while a request's body was still arriving")
	case <-time.After(3 * time.Second):
	}
	// A request that starts after admission stopped, its body never ending, must not hold the
	// drain up to its timeout (a gateway may go on sending to a draining replica).
	late, err := extprocv3.NewExternalProcessorClient(conn).Process(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdr}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[:20]}}},
	} {
		if err := late.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[20:], EndOfStream: true}}})
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("the body's end after SIGTERM: stream error %v, want an ImmediateResponse 503", err)
	}
	im := resp.GetImmediateResponse()
	if im == nil || im.GetStatus().GetCode() != 503 {
		t.Fatalf("the body's end after SIGTERM: got %v, want an ImmediateResponse 503", resp)
	}
	reason := ""
	for _, h := range im.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == extproc.DroppedReasonHeader {
			reason = string(h.GetHeader().GetRawValue())
		}
	}
	if reason != extproc.DroppedShuttingDown {
		t.Fatalf("%s %q, want %q", extproc.DroppedReasonHeader, reason, extproc.DroppedShuttingDown)
	}
	_ = stream.CloseSend()
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop once the request was answered (the drain timeout is 20 s: the late request held it?)")
	}
}

// metricAtLeast is nil when the server's /metrics has the unlabelled gauge name at min or more.
func metricAtLeast(srv *eppserver.Server, name string, min float64) error {
	fams, err := promscrape.Get(context.Background(), nil, "http://"+srv.MetricsAddr().String()+"/metrics")
	if err != nil {
		return err
	}
	v, ok := fams.First(name)
	switch {
	case !ok:
		return fmt.Errorf("%s not exported", name)
	case v < min:
		return fmt.Errorf("%s %v, want ≥ %v", name, v, min)
	}
	return nil
}
