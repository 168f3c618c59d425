package mutant

import (
	"strings"
	"testing"
)

func TestCatalogue(t *testing.T) {
	seen := map[Name]bool{}
	black, white, hooks := 0, 0, 0
	for _, m := range Catalogue() {
		switch {
		case m.Name == "" || m.Breaks == "" || m.Where == "" || m.Target == "":
			t.Errorf("%q: Name, Breaks, Where and Target are required: %+v", m.Name, m)
		case seen[m.Name]:
			t.Errorf("%q: duplicate name", m.Name)
		case m.Kind == WhiteBox && m.Suite == "":
			t.Errorf("%q: a white-box mutant needs a Suite", m.Name)
		case m.Kind != WhiteBox && m.Kind != BlackBox:
			t.Errorf("%q: Kind %q", m.Name, m.Kind)
		case m.Via != Interceptor && m.Via != Plugin && m.Via != EndpointSource && m.Via != MetricsSource && m.Via != ModelRewriteSource && m.Via != Hook &&
			m.Via != LeaderElection && m.Via != ServerOptions:
			t.Errorf("%q: Via %q", m.Name, m.Via)
		case m.Via == Interceptor && m.Kind != BlackBox:
			t.Errorf("%q: an interceptor mutant runs under the conformance registry", m.Name)
		case m.Via == EndpointSource && !m.NeedsAPIServer:
			t.Errorf("%q: an endpoint-source mutant needs the apiserver source", m.Name)
		}
		if m.Via == Hook {
			hooks++
		}
		seen[m.Name] = true
		if m.Kind == WhiteBox {
			white++
		} else {
			black++
		}
	}
	// Issue 19: at most three hooks stay in reference/.
	if hooks > 3 {
		t.Errorf("%d mutants are hooks in reference/, want at most 3", hooks)
	}
	// The matrix promises at least 15 variants of the reference EPP plus the white-box ones.
	if black < 15 || white < 3 {
		t.Errorf("catalogue has %d black-box and %d white-box mutants, want ≥ 15 and ≥ 3", black, white)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr string
	}{
		{"", 0, ""},
		{"kv-ignored", 1, ""},
		{" kv-ignored , queue-ignored ,", 2, ""},
		{"kv-ignored,nope", 0, "unknown mutant nope"},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != tc.want {
			t.Errorf("Parse(%q) = %d mutants, %v; want %d", tc.in, len(got), err, tc.want)
		}
	}
}
