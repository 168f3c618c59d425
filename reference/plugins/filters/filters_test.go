package filters

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func ep(ip string, port int, m *framework.Metrics) *framework.Endpoint {
	return framework.NewEndpoint(&framework.EndpointMetadata{Name: ip, Address: ip, Port: port}, m)
}

func keys(eps []*framework.Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.Key())
	}
	return out
}

func TestHeaderBasedTestingFilter(t *testing.T) {
	pool := []*framework.Endpoint{
		ep("10.0.0.1", 8000, nil), ep("10.0.0.1", 8001, nil), ep("10.0.0.2", 8000, nil),
		ep("fd00::1", 8000, nil), ep("fd00::2", 9000, nil),
	}
	tests := []struct {
		name   string
		header *string
		want   []string
	}{
		{"missing header keeps none", nil, []string{}},
		{"blank header keeps none", ptr("  "), []string{}},
		{"ip selects every rank", ptr("10.0.0.1"), []string{"10.0.0.1:8000", "10.0.0.1:8001"}},
		{"ip:port exact", ptr("10.0.0.1:8001"), []string{"10.0.0.1:8001"}},
		{"two ranks of one ip", ptr("10.0.0.1:8000, 10.0.0.1:8001"), []string{"10.0.0.1:8000", "10.0.0.1:8001"}},
		{"input order, duplicates once", ptr("10.0.0.2,10.0.0.1:8000,10.0.0.2"), []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
		{"wrong port", ptr("10.0.0.2:9999"), []string{}},
		{"unknown and empty entries ignored", ptr(",10.9.9.9,,10.0.0.2,"), []string{"10.0.0.2:8000"}},
		{"ipv6 bare and bracketed", ptr("fd00::1,[fd00::2]:9000"), []string{"[fd00::1]:8000", "[fd00::2]:9000"}},
		{"ipv6 non-canonical", ptr("[fd00:0::1]"), []string{"[fd00::1]:8000"}},
	}
	f := NewHeaderBasedTestingFilter("")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &framework.LLMRequest{Headers: map[string]string{}}
			if tc.header != nil {
				req.Headers[TestEndpointSelectionHeader] = *tc.header
			}
			got := f.Filter(context.Background(), framework.NewCycleState(), req, pool)
			if diff := cmp.Diff(tc.want, keys(got)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestLoRAAffinityFilter(t *testing.T) {
	set := func(names ...string) map[string]struct{} {
		m := map[string]struct{}{}
		for _, n := range names {
			m[n] = struct{}{}
		}
		return m
	}
	running := &framework.Metrics{ActiveModels: set("a1"), MaxActiveModels: 1}
	free := &framework.Metrics{ActiveModels: set("x"), MaxActiveModels: 4}
	waiting := &framework.Metrics{ActiveModels: set("x"), WaitingModels: set("a1"), MaxActiveModels: 2}
	full := &framework.Metrics{ActiveModels: set("x", "y"), MaxActiveModels: 2}
	tests := []struct {
		name string
		pool []*framework.Metrics
		want []string
	}{
		{"running wins", []*framework.Metrics{free, running, waiting}, []string{"10.0.0.2:8000"}},
		{"free slot next", []*framework.Metrics{full, free, waiting, free}, []string{"10.0.0.2:8000", "10.0.0.4:8000"}},
		{"waiting alone keeps all", []*framework.Metrics{full, waiting}, []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
		{"none keeps all", []*framework.Metrics{full, {}}, []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
	}
	f := NewLoRAAffinityFilter("")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pool []*framework.Endpoint
			for i, m := range tc.pool {
				pool = append(pool, ep("10.0.0."+string(rune('1'+i)), 8000, m))
			}
			got := f.Filter(context.Background(), nil, &framework.LLMRequest{TargetModel: "a1"}, pool)
			if diff := cmp.Diff(tc.want, keys(got)); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	reg := framework.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{HeaderBasedTestingFilterType, LoRAAffinityFilterType} {
		f, _ := reg.Factory(typ)
		if p, err := f("", nil, nil); err != nil || p.TypedName().Type != typ {
			t.Fatalf("%s: %v %v", typ, p, err)
		}
		if _, err := f("", json.RawMessage(`{"x":1}`), nil); err == nil {
			t.Fatalf("%s accepted an unknown parameter", typ)
		}
	}
}
