package director

import (
	"errors"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
)

func TestReadControlHeaders(t *testing.T) {
	cases := []struct {
		headers        map[string]string
		objective      string
		fairness       string
		badHeaderNamed string // "" = valid
	}{
		{map[string]string{}, "", framework.DefaultFairnessID, ""},
		{map[string]string{"x-llm-d-inference-objective": "gold", "x-gateway-inference-objective": "batch"}, "gold", framework.DefaultFairnessID, ""},
		{map[string]string{"x-gateway-inference-objective": " batch "}, "batch", framework.DefaultFairnessID, ""},
		{map[string]string{"x-llm-d-inference-fairness-id": "tenant-a", "x-gateway-inference-fairness-id": "b"}, "", "tenant-a", ""},
		{map[string]string{"x-gateway-inference-fairness-id": "  "}, "", framework.DefaultFairnessID, ""},
		{map[string]string{"x-llm-d-inference-objective": "Not A Name!"}, "", "", "x-llm-d-inference-objective"},
		{map[string]string{"x-gateway-inference-objective": "UPPER"}, "", "", "x-gateway-inference-objective"},
		// The current name wins even when its value is the bad one.
		{map[string]string{"x-llm-d-inference-objective": "a_b", "x-gateway-inference-objective": "ok"}, "", "", "x-llm-d-inference-objective"},
	}
	for i, tc := range cases {
		req := &framework.LLMRequest{Headers: tc.headers}
		err := readControlHeaders(req)
		if tc.badHeaderNamed != "" {
			if !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.badHeaderNamed) {
				t.Errorf("case %d %v: err %v, want a bad request naming %s", i, tc.headers, err, tc.badHeaderNamed)
			}
			continue
		}
		if err != nil || req.Objective != tc.objective || req.FairnessID != tc.fairness {
			t.Errorf("case %d %v: (%q, %q, %v), want (%q, %q, nil)", i, tc.headers, req.Objective, req.FairnessID, err, tc.objective, tc.fairness)
		}
	}
}
