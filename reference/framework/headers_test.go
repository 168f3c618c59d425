package framework

import "testing"

func TestRequestHeaderAliases(t *testing.T) {
	cases := []struct {
		name    string
		headers map[string]string
		key     string
		want    string
		as      string
		ok      bool
	}{
		{"current name", map[string]string{HeaderObjective: "a"}, HeaderObjective, "a", HeaderObjective, true},
		{"legacy alias", map[string]string{HeaderObjectiveLegacy: "b"}, HeaderObjective, "b", HeaderObjectiveLegacy, true},
		{"current wins", map[string]string{HeaderModelNameRewrite: "new", HeaderModelNameRewriteLegacy: "old"}, HeaderModelNameRewrite, "new", HeaderModelNameRewrite, true},
		// llm-d-router v0.10.0 GetLowerCaseHeaderValue: the first present alias wins, even empty.
		{"empty current masks legacy", map[string]string{HeaderTTFTSLO: "", HeaderTTFTSLOLegacy: "5"}, HeaderTTFTSLO, "", HeaderTTFTSLO, true},
		{"absent", map[string]string{"x-other": "1"}, HeaderFairnessID, "", "", false},
		{"unaliased name", map[string]string{"x-session-token": "t"}, "X-Session-Token", "t", "x-session-token", true},
	}
	for _, tc := range cases {
		v, as, ok := RequestHeader(tc.headers, tc.key)
		if v != tc.want || as != tc.as || ok != tc.ok {
			t.Errorf("%s: RequestHeader = (%q, %q, %v), want (%q, %q, %v)", tc.name, v, as, ok, tc.want, tc.as, tc.ok)
		}
	}
	if n := len(ControlHeaders()); n != 10 {
		t.Errorf("ControlHeaders: %d names, want 10 (5 headers, current and legacy)", n)
	}
}
