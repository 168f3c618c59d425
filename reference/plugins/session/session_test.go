package session

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
)

func endpoints() []*framework.Endpoint {
	mds := []*framework.EndpointMetadata{
		{Namespace: "ns", Name: "pod-a-rank-0", Address: "10.0.0.1", Port: 8000},
		{Namespace: "ns", Name: "pod-b-rank-0", Address: "10.0.0.2", Port: 8000},
		{Namespace: "ns", Name: "pod-c-rank-0", Address: "10.0.0.3", Port: 8000},
	}
	keys := []string{mds[0].Key(), mds[1].Key(), mds[2].Key()}
	return framework.NewEndpoints(mds, keys, make([]*framework.Metrics, 3))
}

func TestToken(t *testing.T) {
	md := &framework.EndpointMetadata{Namespace: "default", Name: "vllm-0-rank-0"}
	// base64("default/vllm-0-rank-0"), as upstream's WriteResponseHeader encodes ID.String().
	if got := Token(md); got != "ZGVmYXVsdC92bGxtLTAtcmFuay0w" {
		t.Errorf("Token = %s", got)
	}
}

func TestFilterAndScorer(t *testing.T) {
	eps := endpoints()
	f := NewFilter("", Parameters{})
	sc := NewScorer("s", Parameters{})
	tok := Token(eps[1].Metadata)
	req := &framework.LLMRequest{Headers: map[string]string{DefaultHeader: tok}}
	if got := f.Filter(context.Background(), nil, req, eps); len(got) != 1 || got[0] != eps[1] {
		t.Errorf("Filter kept %v, want only the session's endpoint", got)
	}
	if got := sc.Score(context.Background(), nil, req, eps); got[eps[1].Key()] != 1 || got[eps[0].Key()] != 0 || len(got) != 3 {
		t.Errorf("Score = %v", got)
	}
	// The session's endpoint is not a candidate (left the pool, outside the subset): keep all.
	if got := f.Filter(context.Background(), nil, req, []*framework.Endpoint{eps[0], eps[2]}); len(got) != 2 {
		t.Errorf("Filter kept %v, want both candidates", got)
	}
	// No token: no preference.
	if got := f.Filter(context.Background(), nil, &framework.LLMRequest{Headers: map[string]string{}}, eps); len(got) != 3 {
		t.Errorf("Filter without a token kept %v", got)
	}
	// Malformed tokens are 400 naming the header [eppkit].
	for _, bad := range []string{"", "  ", "%%%", "not base64!"} {
		err := f.AdmitRequest(context.Background(), &framework.LLMRequest{Headers: map[string]string{DefaultHeader: bad}}, eps)
		if !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), DefaultHeader) {
			t.Errorf("token %q: AdmitRequest = %v, want a bad request naming %s", bad, err, DefaultHeader)
		}
	}
	if err := f.AdmitRequest(context.Background(), req, eps); err != nil {
		t.Errorf("a valid token refused: %v", err)
	}
	// The response names the endpoint that served the request.
	resp := &framework.Response{Endpoint: eps[2].Metadata}
	f.ResponseHeader(context.Background(), req, resp)
	if resp.SetHeaders[DefaultHeader] != Token(eps[2].Metadata) {
		t.Errorf("response headers %v", resp.SetHeaders)
	}
}

func TestProfileName(t *testing.T) {
	eps := endpoints()
	f := NewFilter("", Parameters{ProfileName: "prefill"})
	req := &framework.LLMRequest{RequestID: "r1", Headers: map[string]string{}}
	f.PreRequest(context.Background(), req, &framework.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*framework.ProfileRunResult{
		"decode": {TargetEndpoints: eps[:1]}, "prefill": {TargetEndpoints: eps[2:]}}})
	resp := &framework.Response{Endpoint: eps[0].Metadata}
	f.ResponseHeader(context.Background(), req, resp)
	if resp.SetHeaders[DefaultHeader] != Token(eps[2].Metadata) {
		t.Errorf("token %q, want the prefill profile's endpoint", resp.SetHeaders[DefaultHeader])
	}
	f.ResponseComplete(context.Background(), req, resp)
	resp = &framework.Response{Endpoint: eps[0].Metadata}
	f.ResponseHeader(context.Background(), req, resp) // the profile's target is forgotten: no token
	if _, ok := resp.SetHeaders[DefaultHeader]; ok {
		t.Errorf("a token after ResponseComplete: %v", resp.SetHeaders)
	}
}

func TestParameters(t *testing.T) {
	p, err := parse(json.RawMessage(`{"strategy":"encoded_endpoint_header","encodedEndpointHeaderConfig":{"header":" X-My-Session "}}`))
	if err != nil || p.EncodedEndpointHeaderConfig.Header != "x-my-session" {
		t.Errorf("parse = %+v, %v", p, err)
	}
	for raw, want := range map[string]string{
		`{"strategy":"session_id"}`: "parameters.strategy",
		`{"strategy":"cookie"}`:     "parameters.strategy",
		`{"stratgy":"x"}`:           "stratgy",
	} {
		if _, err := parse(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parse(%s) = %v, want an error naming %s", raw, err, want)
		}
	}
}
