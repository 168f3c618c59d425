package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient/extproctest"
)

// TestProbePickHeadersOnly: an EPP that picks but answers request bodies with a plain
// CommonResponse (no streamed_response, as GIE v1.6.0's lwepp does) fails the body probe with a
// protocol violation and passes the headers-only probe, which sends no body at all.
func TestProbePickHeadersOnly(t *testing.T) {
	const pick = "127.0.10.1:8000"
	srv, err := extproctest.Start(extproctest.Script{OnRequest: func(seen *extproctest.Seen) []*extprocv3.ProcessingResponse {
		out := extproctest.PickResponses(pick, nil, nil, 0, false)
		if !seen.HeadersEOS {
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}})
		}
		return out
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	pool := []string{pick, "127.0.10.2:8000"}
	if _, err := ProbePick(ctx, srv.Addr(), nil, "m", pool, 5*time.Second, false); !errors.Is(err, extprocclient.ErrProtocol) {
		t.Fatalf("body probe: err = %v, want a protocol violation", err)
	}
	got, err := ProbePick(ctx, srv.Addr(), nil, "m", pool, 5*time.Second, true)
	if err != nil || got != pick {
		t.Fatalf("headers-only probe = %q, %v; want %s", got, err, pick)
	}
	seen := srv.Seen()
	last := seen[len(seen)-1]
	if !last.HeadersEOS || last.BodyChunks != 0 || last.Headers[":method"] != "GET" || last.Headers[":path"] != "/v1/models" {
		t.Errorf("headers-only probe sent %+v, want GET /v1/models with end_of_stream on the headers", last)
	}
}
