package apiserver

import (
	"slices"
	"strings"
	"testing"
)

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		name      string
		addrs     []string
		wantIPs   []string
		wantPorts []int
		wantErr   string // substring; "" = no error
	}{
		{name: "three aliases one port", addrs: []string{"127.0.10.1:8000", "127.0.10.2:8000", "127.0.10.3:8000"},
			wantIPs: []string{"127.0.10.1", "127.0.10.2", "127.0.10.3"}, wantPorts: []int{8000}},
		{name: "ipv6", addrs: []string{"[::1]:9000"}, wantIPs: []string{"::1"}, wantPorts: []int{9000}},
		{name: "empty", addrs: nil, wantErr: "Endpoints: at least one"},
		{name: "data-parallel ranks", addrs: []string{"127.0.10.1:8002", "127.0.10.1:8000", "127.0.10.2:8000", "127.0.10.1:8001", "127.0.10.2:8001", "127.0.10.2:8002"},
			wantIPs: []string{"127.0.10.1", "127.0.10.2"}, wantPorts: []int{8000, 8001, 8002}},
		{name: "mixed ports", addrs: []string{"127.0.10.1:8000", "127.0.10.2:8001"}, wantErr: "127.0.10.2 has ports [8001], 127.0.10.1 has [8000]"},
		{name: "one pod lacks a rank", addrs: []string{"127.0.10.1:8000", "127.0.10.1:8001", "127.0.10.2:8000"}, wantErr: "127.0.10.2 has ports [8000], 127.0.10.1 has [8000 8001]"},
		{name: "more than 8 ranks", addrs: []string{"127.0.10.1:1", "127.0.10.1:2", "127.0.10.1:3", "127.0.10.1:4", "127.0.10.1:5",
			"127.0.10.1:6", "127.0.10.1:7", "127.0.10.1:8", "127.0.10.1:9"}, wantErr: "at most 8 targetPorts"},
		{name: "duplicate ip", addrs: []string{"127.0.10.1:8000", "127.0.10.1:8000"}, wantErr: "Endpoints[1]: duplicate IP"},
		{name: "hostname", addrs: []string{"localhost:8000"}, wantErr: "Endpoints[0]: address \"localhost:8000\": \"localhost\" is not an IP"},
		{name: "no port", addrs: []string{"127.0.10.1"}, wantErr: "Endpoints[0]: address \"127.0.10.1\": want ip:port"},
		{name: "port zero", addrs: []string{"127.0.10.1:0"}, wantErr: "port must be 1-65535"},
		{name: "port too big", addrs: []string{"127.0.10.1:70000"}, wantErr: "port must be 1-65535"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ips, ports, err := parseEndpoints(tc.addrs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseEndpoints(%v) error = %v, want it to contain %q", tc.addrs, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseEndpoints(%v): %v", tc.addrs, err)
			}
			if !slices.Equal(ports, tc.wantPorts) || !slices.Equal(ips, tc.wantIPs) {
				t.Fatalf("parseEndpoints(%v) = %v, %v; want %v, %v", tc.addrs, ips, ports, tc.wantIPs, tc.wantPorts)
			}
		})
	}
}

func TestPodNameFor(t *testing.T) {
	tests := []struct{ pool, ip, want string }{
		{"eppkit-pool", "127.0.10.1", "eppkit-pool-127-0-10-1"},
		{"p", "::1", "p---1"},
		{"p", "fd00::a", "p-fd00--a"},
	}
	for _, tc := range tests {
		if got := PodNameFor(tc.pool, tc.ip); got != tc.want {
			t.Errorf("PodNameFor(%q, %q) = %q, want %q", tc.pool, tc.ip, got, tc.want)
		}
	}
}

func TestStartValidatesBeforeStarting(t *testing.T) {
	// Bad options fail before any process starts (no binaries needed).
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "no endpoints", opts: Options{}, wantErr: "Endpoints: at least one"},
		{name: "bad picker port", opts: Options{Endpoints: []string{"127.0.10.1:8000"}, EndpointPickerPort: 70000}, wantErr: "EndpointPickerPort"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := Start(t.Context(), tc.opts)
			if err == nil {
				_ = env.Stop()
				t.Fatalf("Start(%+v) succeeded, want error containing %q", tc.opts, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Start error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
