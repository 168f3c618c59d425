package extprocclient

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// actionCases holds, for every append_action, what it does to x-dest when the request carries
// x-dest: old (present) and when it does not (absent) — base.proto HeaderValueOption's
// definitions. TestEveryAppendActionHasACase checks it covers go-control-plane's whole enum.
var actionCases = map[corev3.HeaderValueOption_HeaderAppendAction]struct{ present, absent []string }{
	corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:    {present: []string{"old", "new"}, absent: []string{"new"}},
	corev3.HeaderValueOption_ADD_IF_ABSENT:              {present: []string{"old"}, absent: []string{"new"}},
	corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD: {present: []string{"new"}, absent: []string{"new"}},
	corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:        {present: []string{"new"}, absent: nil},
}

func mutation(opts ...*corev3.HeaderValueOption) *extprocv3.HeaderMutation {
	return &extprocv3.HeaderMutation{SetHeaders: opts}
}

func opt(key, raw string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: key, RawValue: []byte(raw)}, AppendAction: action}
}

func TestApplyHeaderMutationPerAction(t *testing.T) {
	for action, want := range actionCases {
		for _, present := range []bool{true, false} {
			t.Run(action.String()+map[bool]string{true: "/present", false: "/absent"}[present], func(t *testing.T) {
				h := HeaderList{{Key: ":path", Value: "/v1/x"}}
				if present {
					h = append(h, Header{Key: "x-dest", Value: "old"})
				}
				// The key is lower-cased as Envoy's LowerCaseString does.
				rep, err := ApplyHeaderMutation(&h, mutation(opt("X-Dest", "new", action)), SemanticsAppendAction)
				if err != nil {
					t.Fatal(err)
				}
				wantValues := want.absent
				if present {
					wantValues = want.present
				}
				if diff := cmp.Diff(wantValues, h.Values("x-dest")); diff != "" {
					t.Errorf("x-dest values (-want +got):\n%s", diff)
				}
				if got := h.Duplicates(rep.Touched); (len(wantValues) > 1) != (len(got) > 0) {
					t.Errorf("Duplicates = %v with values %v", got, wantValues)
				}
			})
		}
	}
}

// TestEveryAppendActionHasACase fails when go-control-plane's HeaderAppendAction enum gains a
// value this gateway does not apply (and the table above does not describe).
func TestEveryAppendActionHasACase(t *testing.T) {
	for n, name := range corev3.HeaderValueOption_HeaderAppendAction_name {
		action := corev3.HeaderValueOption_HeaderAppendAction(n)
		if _, ok := actionCases[action]; !ok {
			t.Errorf("append_action %s (%d) has no case", name, n)
		}
		h := HeaderList{{Key: "x-dest", Value: "old"}}
		if _, err := ApplyHeaderMutation(&h, mutation(opt("x-dest", "new", action)), SemanticsAppendAction); err != nil {
			t.Errorf("append_action %s: %v", name, err)
		}
	}
	if len(actionCases) != len(corev3.HeaderValueOption_HeaderAppendAction_name) {
		t.Errorf("%d cases for %d enum values", len(actionCases), len(corev3.HeaderValueOption_HeaderAppendAction_name))
	}
}

func TestDeprecatedAppendAndSemantics(t *testing.T) {
	withAppend := func(v bool, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		o := opt("x-dest", "new", action)
		o.Append = wrapperspb.Bool(v) //lint:ignore SA1019 the deprecated field is what this test sends
		return o
	}
	tests := []struct {
		name    string
		option  *corev3.HeaderValueOption
		sem     HeaderSemantics
		want    []string
		wantErr string
	}{
		{"append true appends (header_parser.cc)", withAppend(true, 0), SemanticsAppendAction, []string{"old", "new"}, ""},
		{"append false overwrites", withAppend(false, 0), SemanticsAppendAction, []string{"new"}, ""},
		{"append with a non-default append_action is refused", withAppend(false, corev3.HeaderValueOption_ADD_IF_ABSENT), SemanticsAppendAction, nil, "both append and append_action"},
		{"unknown append_action", opt("x-dest", "new", 9), SemanticsAppendAction, nil, "unknown append_action 9"},
		{"ext_proc as released: zero value overwrites", opt("x-dest", "new", 0), SemanticsEnvoyExtProc, []string{"new"}, ""},
		{"ext_proc as released: append_action ignored", opt("x-dest", "new", corev3.HeaderValueOption_ADD_IF_ABSENT), SemanticsEnvoyExtProc, []string{"new"}, ""},
		{"ext_proc as released: append true appends", withAppend(true, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS), SemanticsEnvoyExtProc, []string{"old", "new"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := HeaderList{{Key: "x-dest", Value: "old"}}
			_, err := ApplyHeaderMutation(&h, mutation(tc.option), tc.sem)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, h.Values("x-dest")); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRawValueAndValue(t *testing.T) {
	h := HeaderList{}
	rep, err := ApplyHeaderMutation(&h, mutation(&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-v", Value: "text"}}), SemanticsAppendAction)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Values("x-v"); len(got) != 1 || got[0] != "" || len(rep.Warnings) != 1 {
		t.Errorf("value-only: values %q warnings %v; Envoy reads raw_value, so the header is empty", got, rep.Warnings)
	}
	both := &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "x-v", Value: "a", RawValue: []byte("a")}}
	if _, err := ApplyHeaderMutation(&h, mutation(both), SemanticsAppendAction); err == nil || !strings.Contains(err.Error(), "only one of value or raw_value") {
		t.Errorf("value and raw_value: error %v", err)
	}
	for _, bad := range []*corev3.HeaderValueOption{opt("x bad", "v", 0), opt("x-ok", "a\r\nb", 0), opt("", "v", 0)} {
		if _, err := ApplyHeaderMutation(&h, mutation(bad), SemanticsAppendAction); err == nil {
			t.Errorf("accepted %v", bad)
		}
	}
}

func TestRemoveBeforeSet(t *testing.T) {
	h := HeaderList{{Key: "x-a", Value: "1"}, {Key: "x-a", Value: "2"}, {Key: "x-b", Value: "3"}}
	hm := &extprocv3.HeaderMutation{RemoveHeaders: []string{"X-A"},
		SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "new", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD)}}
	rep, err := ApplyHeaderMutation(&h, hm, SemanticsAppendAction)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(HeaderList{{Key: "x-b", Value: "3"}, {Key: "x-a", Value: "new"}}, h); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if len(h.Duplicates(rep.Touched)) != 0 {
		t.Errorf("duplicates after remove-then-append: %v", h.Duplicates(rep.Touched))
	}
}
