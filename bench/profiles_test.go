package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/fakes/vllm"
)

func TestParseFleetProfiles(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"default:1,slow:1", []string{"default", "slow"}},
		{"frozen:2, slow", []string{"default", "default", "slow"}},
		{"slow:2,default", []string{"slow", "slow", "default"}},
	} {
		got, err := ParseFleetProfiles(tc.in, 250)
		if err != nil || !cmp.Equal(got, tc.want) {
			t.Errorf("ParseFleetProfiles(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"fast":                `unknown profile "fast"`,
		"slow:0":              `"slow:0": the count must be an integer in [1,250]`,
		"slow:x":              `"slow:x"`,
		"default:200,slow:60": "more than 250 endpoints",
	} {
		if _, err := ParseFleetProfiles(in, 250); err == nil || !strings.Contains(err.Error(), "--fleet-profiles") || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFleetProfiles(%q) error = %v, want one naming --fleet-profiles and %q", in, err, want)
		}
	}
}

// TestServeOptionsFleet: --fleet-size 0 takes the endpoints --fleet-profiles lists; an explicit
// size cycles the profiles over it.
func TestServeOptionsFleet(t *testing.T) {
	for _, tc := range []struct {
		size     int
		profiles string
		n        int
		counts   map[string]int
	}{
		{0, "", DefaultFleetSize, map[string]int{"default": DefaultFleetSize}},
		{0, "default:1,slow:1", 2, map[string]int{"default": 1, "slow": 1}},
		{6, "default:2,slow", 6, map[string]int{"default": 4, "slow": 2}},
	} {
		o := ServeOptions{FleetSize: tc.size, FleetProfiles: tc.profiles}
		n, p, err := o.Fleet(MaxRealFleetSize)
		if err != nil || n != tc.n || !cmp.Equal(ProfileCounts(p, n), tc.counts) {
			t.Errorf("Fleet(size %d, %q) = %d, %v, %v; want %d endpoints %v", tc.size, tc.profiles, n, p, err, tc.n, tc.counts)
		}
	}
	if _, _, err := (&ServeOptions{FleetSize: 251}).Fleet(MaxRealFleetSize); err == nil || !strings.Contains(err.Error(), "--fleet-size") {
		t.Errorf("--fleet-size 251: err = %v", err)
	}
}

// TestApplyProfile: slow doubles prefill overhead, per-token prefill and inter-token latency of
// the frozen profile and leaves the rest of FakeConfig alone.
func TestApplyProfile(t *testing.T) {
	fast := FakeConfig(0, 1, 1000, 4096, []string{"a"})
	slow := fast
	ApplyProfile(&slow, ProfileSlow)
	if slow.Latency.PrefillOverhead.D() != 2*FrozenPrefillOverhead || slow.Latency.PrefillTimePerToken.D() != 2*FrozenPrefillTimePerToken ||
		slow.Latency.InterTokenLatency.D() != 2*FrozenInterTokenLatency {
		t.Errorf("slow latency %+v, want the frozen profile's prefill and inter-token times doubled", slow.Latency)
	}
	back := slow
	ApplyProfile(&back, ProfileDefault)
	if diff := cmp.Diff(fast, back, cmp.AllowUnexported(vllm.Config{})); diff != "" {
		t.Errorf("default after slow differs from FakeConfig (-want +got):\n%s", diff)
	}
}

func TestPrintEndpointsShowsProfiles(t *testing.T) {
	r := &Result{Endpoints: []EndpointRow{{Name: "conformance-0", Requests: 3}, {Name: "conformance-1", Requests: 1}}}
	var plain bytes.Buffer
	PrintEndpoints(&plain, r)
	if strings.Contains(plain.String(), "profile") {
		t.Errorf("a table without profiles has a profile column:\n%s", plain.String())
	}
	SetEndpointProfiles(r, map[string]string{"conformance-0": ProfileDefault, "conformance-1": ProfileSlow})
	var b bytes.Buffer
	PrintEndpoints(&b, r)
	lines := strings.Split(b.String(), "\n")
	if !strings.Contains(lines[0], "profile") || !strings.Contains(lines[1], "default") || !strings.Contains(lines[2], "slow") {
		t.Errorf("per-endpoint table without each endpoint's profile:\n%s", b.String())
	}
}
