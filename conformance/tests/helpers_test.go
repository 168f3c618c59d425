package tests

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSplitPick(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"10.0.0.1:8000", []string{"10.0.0.1:8000"}},
		{" 10.0.0.1:8000 , 10.0.0.2:8000,, ", []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
		{"[::1]:8000,10.0.0.2:8000", []string{"[::1]:8000", "10.0.0.2:8000"}},
	} {
		if diff := cmp.Diff(tc.want, splitPick(tc.in)); diff != "" {
			t.Errorf("splitPick(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestOtherPortAndHostOf(t *testing.T) {
	for _, tc := range []struct{ in, other, host string }{
		{"127.0.10.1:8000", "127.0.10.1:9000", "127.0.10.1"},
		{"127.0.10.1:65000", "127.0.10.1:464", "127.0.10.1"},
		{"[::1]:80", "[::1]:1080", "::1"},
		{"no-port", "no-port", "no-port"},
	} {
		if got := otherPort(tc.in); got != tc.other {
			t.Errorf("otherPort(%q) = %q, want %q", tc.in, got, tc.other)
		}
		if got := hostOf(tc.in); got != tc.host {
			t.Errorf("hostOf(%q) = %q, want %q", tc.in, got, tc.host)
		}
	}
}

func TestCountAndHistogram(t *testing.T) {
	eps := []string{"a", "b", "a", "c", "a"}
	if got := count(eps, "a"); got != 3 {
		t.Errorf("count = %d, want 3", got)
	}
	if diff := cmp.Diff(map[string]int{"a": 3, "b": 1, "c": 1}, histogram(eps)); diff != "" {
		t.Errorf("histogram (-want +got):\n%s", diff)
	}
}
