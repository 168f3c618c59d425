package profiles

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/eppkit/eppkit/reference/framework"
)

func TestSingleProfileHandler(t *testing.T) {
	h := NewSingleProfileHandler("")
	ctx := context.Background()
	profiles := map[string]*framework.SchedulerProfile{"default": {Name: "default"}}
	if got := h.Pick(ctx, nil, nil, profiles, map[string]*framework.ProfileRunResult{}); len(got) != 1 || got["default"] == nil {
		t.Fatalf("first round: %v", got)
	}
	ep := framework.NewEndpoint(&framework.EndpointMetadata{Address: "10.0.0.1", Port: 8000}, nil)
	ok := &framework.ProfileRunResult{TargetEndpoints: []*framework.Endpoint{ep}}
	if got := h.Pick(ctx, nil, nil, profiles, map[string]*framework.ProfileRunResult{"default": ok}); len(got) != 0 {
		t.Fatalf("second round: %v", got)
	}
	if got := h.Pick(ctx, nil, nil, profiles, map[string]*framework.ProfileRunResult{"default": nil}); len(got) != 0 {
		t.Fatalf("a nil result must still end the loop: %v", got)
	}

	tests := []struct {
		name    string
		results map[string]*framework.ProfileRunResult
		wantErr bool
	}{
		{"one result", map[string]*framework.ProfileRunResult{"default": ok}, false},
		{"none", map[string]*framework.ProfileRunResult{}, true},
		{"two", map[string]*framework.ProfileRunResult{"a": ok, "b": ok}, true},
		{"nil result", map[string]*framework.ProfileRunResult{"default": nil}, true},
		{"empty targets", map[string]*framework.ProfileRunResult{"default": {}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h.ProcessResults(ctx, nil, nil, tc.results)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				// Unwrapped: the runtime decides 429 vs 500.
				for _, typed := range []error{framework.ErrShed, framework.ErrNoEndpoints, framework.ErrInternal, framework.ErrBadRequest} {
					if errors.Is(err, typed) {
						t.Fatalf("error wraps %v; it must be left to the runtime", typed)
					}
				}
				return
			}
			if res.PrimaryProfileName != "default" || res.Primary() != ok {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestRegister(t *testing.T) {
	reg := framework.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	f, _ := reg.Factory(SingleProfileHandlerType)
	if p, err := f("", nil, nil); err != nil || p.TypedName().Name != SingleProfileHandlerType {
		t.Fatalf("%v %v", p, err)
	}
	if _, err := f("", json.RawMessage(`{"x":1}`), nil); err == nil {
		t.Fatalf("unknown parameter accepted")
	}
}
