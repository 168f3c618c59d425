package main

import (
	"testing"
	"time"
)

func TestFlakeLineRE(t *testing.T) {
	for _, tc := range []struct {
		line                      string
		ok                        bool
		outcome, profile, name, d string
		msg                       string
	}{
		{"PASS  EPP/EPPHealth (328ms)", true, "PASS", "EPP", "EPPHealth", "328ms", ""},
		{"FAIL  EPP-Routing/QueueAwareness (1.004s): statistical rule violated (seed 1): x", true, "FAIL", "EPP-Routing", "QueueAwareness", "1.004s", "statistical rule violated (seed 1): x"},
		{"SKIP  EPP-Routing/EndpointChurn (0s): the endpoint source cannot add", true, "SKIP", "EPP-Routing", "EndpointChurn", "0s", "the endpoint source cannot add"},
		{"profile EPP          PASS        7 passed, 0 failed, 0 skipped", false, "", "", "", "", ""},
		{"harness ready in 623ms: pool [127.0.10.1:42447]", false, "", "", "", "", ""},
	} {
		m := flakeLineRE.FindStringSubmatch(tc.line)
		if (m != nil) != tc.ok {
			t.Errorf("%q: matched %v, want %v", tc.line, m != nil, tc.ok)
			continue
		}
		if m == nil {
			continue
		}
		if m[1] != tc.outcome || m[2] != tc.profile || m[3] != tc.name || m[4] != tc.d || m[5] != tc.msg {
			t.Errorf("%q: got %q", tc.line, m[1:])
		}
	}
}

func TestDurationStats(t *testing.T) {
	mn, med, mx := durationStats([]time.Duration{3 * time.Second, time.Second, 2 * time.Second})
	if mn != "1s" || med != "2s" || mx != "3s" {
		t.Errorf("durationStats = %s %s %s, want 1s 2s 3s", mn, med, mx)
	}
	if mn, _, _ := durationStats(nil); mn != "—" {
		t.Errorf("durationStats(nil) min = %q, want —", mn)
	}
}
