package extproc

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func TestResultHeaders(t *testing.T) {
	tests := []struct {
		name string
		res  *framework.SchedulingResult
		want []string // "key=value"
	}{
		{"nil result", nil, nil},
		{"no headers", &framework.SchedulingResult{}, nil},
		{"prefill pick, lower-cased and sorted", &framework.SchedulingResult{RequestHeaders: map[string]string{
			"X-Prefiller-Host-Port": "10.0.0.2:8000", "a-first": "1"}}, []string{"a-first=1", "x-prefiller-host-port=10.0.0.2:8000"}},
		{"reserved and pseudo headers are never set", &framework.SchedulingResult{RequestHeaders: map[string]string{
			DestinationEndpointKey: "1.2.3.4:5", "Content-Length": "9", "x-request-id": "x", "x-gateway-inference-objective": "o",
			":path": "/evil", "": "empty", "ok": "yes"}}, []string{"ok=yes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, h := range resultHeaders(tc.res) {
				got = append(got, h.GetHeader().GetKey()+"="+string(h.GetHeader().GetRawValue()))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("headers (-want +got):\n%s", diff)
			}
		})
	}
}
