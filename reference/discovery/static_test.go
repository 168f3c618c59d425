package discovery

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func keys(eps []*framework.EndpointMetadata) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.Key())
	}
	return out
}

func TestNewStatic(t *testing.T) {
	s, err := NewStatic([]string{" 127.0.10.2:8000", "[fd00::1]:8000", "127.0.10.1:8000", "127.0.10.1:8001", "[::ffff:10.0.0.1]:9"},
		map[string]int{"critical": 2, "batch": -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil || !s.Synced() {
		t.Fatalf("Start = %v, Synced = %v; want nil, true", err, s.Synced())
	}
	want := []string{"10.0.0.1:9", "127.0.10.1:8000", "127.0.10.1:8001", "127.0.10.2:8000", "[fd00::1]:8000"}
	got := s.Endpoints()
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Errorf("Endpoints keys, sorted (-want +got):\n%s", diff)
	}
	for _, e := range got {
		if e.Name != e.Key() || e.PodName != e.Key() {
			t.Errorf("endpoint %s: Name %q PodName %q, want the key", e.Key(), e.Name, e.PodName)
		}
	}
	if got[4].Address != "fd00::1" || got[4].Port != 8000 {
		t.Errorf("IPv6 endpoint = %+v, want Address fd00::1 without brackets", got[4])
	}
	// Endpoints hands out copies.
	got[0].Port = 1
	if s.Endpoints()[0].Port != 9 {
		t.Error("Endpoints returned shared metadata")
	}

	var calls [][2][]string
	s.Subscribe(func(added, removed []*framework.EndpointMetadata) {
		calls = append(calls, [2][]string{keys(added), keys(removed)})
	})
	if diff := cmp.Diff([][2][]string{{want, {}}}, calls); diff != "" {
		t.Errorf("Subscribe calls (-want +got):\n%s", diff)
	}

	for name, want := range map[string]int{"critical": 2, "batch": -1} {
		if p, ok := s.Priority(name); !ok || p != want {
			t.Errorf("Priority(%q) = %d, %v; want %d, true", name, p, ok, want)
		}
	}
	if p, ok := s.Priority("unknown"); ok || p != 0 {
		t.Errorf("Priority(unknown) = %d, %v; want 0, false", p, ok)
	}
}

func TestNewStaticEmpty(t *testing.T) {
	s, err := NewStatic(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Endpoints()) != 0 || !s.Synced() {
		t.Errorf("empty static source: %v endpoints, synced %v", len(s.Endpoints()), s.Synced())
	}
	called := false
	s.Subscribe(func(_, _ []*framework.EndpointMetadata) { called = true })
	if called {
		t.Error("Subscribe called fn with nothing to report")
	}
}

func TestNewStaticErrors(t *testing.T) {
	tests := []struct {
		addrs   []string
		wantErr string
	}{
		{[]string{"127.0.0.1:80", "localhost:8000"}, `endpoints[1] "localhost:8000": host "localhost" is not an IP address`},
		{[]string{"127.0.0.1"}, `endpoints[0] "127.0.0.1": want ip:port`},
		{[]string{"fd00::1:8000"}, `endpoints[0] "fd00::1:8000": want ip:port with IPv6 in brackets`},
		{[]string{"127.0.0.1:0"}, `port "0" is not in 1-65535`},
		{[]string{"127.0.0.1:65536"}, `port "65536" is not in 1-65535`},
		{[]string{"127.0.0.1:http"}, `port "http" is not in 1-65535`},
		{[]string{"[fe80::1%eth0]:80"}, `IPv6 zone "eth0"`},
		{[]string{"10.0.0.1:80", ""}, `endpoints[1] "": empty entry`},
		{[]string{"10.0.0.1:80", "10.0.0.1:80"}, `endpoints[1] "10.0.0.1:80": duplicate`},
		{[]string{"[::ffff:10.0.0.1]:80", "10.0.0.1:80"}, `duplicate`},
	}
	for _, tc := range tests {
		_, err := NewStatic(tc.addrs, nil)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("NewStatic(%q) error = %v, want %q", tc.addrs, err, tc.wantErr)
		}
	}
	if _, err := NewStatic(nil, map[string]int{" ": 1}); err == nil || !strings.Contains(err.Error(), "empty objective name") {
		t.Errorf("empty objective name: error = %v", err)
	}
}

func TestParseObjectives(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]int
		wantErr string
	}{
		{in: "", want: map[string]int{}},
		{in: "  ", want: map[string]int{}},
		{in: "critical=2", want: map[string]int{"critical": 2}},
		{in: " critical = 2 , batch=-1,zero=0", want: map[string]int{"critical": 2, "batch": -1, "zero": 0}},
		{in: "a=1,b", wantErr: `objectives[1] "b": want name=priority`},
		{in: "=1", wantErr: `objectives[0] "=1": empty objective name`},
		{in: "a=high", wantErr: `priority "high" is not an integer`},
		{in: "a=1.5", wantErr: `priority "1.5" is not an integer`},
		{in: "a=1,a=2", wantErr: `objective "a" given twice`},
		{in: "a=1,", wantErr: `objectives[1] "": want name=priority`},
	}
	for _, tc := range tests {
		got, err := ParseObjectives(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseObjectives(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseObjectives(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseObjectives(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
