package modelrewrite

import (
	"math"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

func exact(models ...string) []v1alpha2.Match {
	var out []v1alpha2.Match
	for _, m := range models {
		out = append(out, v1alpha2.Match{Model: &v1alpha2.ModelMatch{Value: m}})
	}
	return out
}

func targets(pairs ...any) []v1alpha2.TargetModel {
	var out []v1alpha2.TargetModel
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, v1alpha2.TargetModel{ModelRewrite: pairs[i].(string), Weight: int32(pairs[i+1].(int))})
	}
	return out
}

func spec(rules ...v1alpha2.InferenceModelRewriteRule) *v1alpha2.InferenceModelRewriteSpec {
	return &v1alpha2.InferenceModelRewriteSpec{Rules: rules}
}

func mustSet(t *testing.T, s *Store, name string, created int64, sp *v1alpha2.InferenceModelRewriteSpec) {
	t.Helper()
	if err := s.Set(name, time.Unix(created, 0), sp); err != nil {
		t.Fatal(err)
	}
}

// TestPrecedence: exact beats generic, the older rewrite beats the newer (then the lower name),
// the first matching rule of a rewrite wins, deletion falls back, unmatched models stay.
func TestPrecedence(t *testing.T) {
	s := NewStore(1)
	mustSet(t, s, "generic-old", 1, spec(v1alpha2.InferenceModelRewriteRule{Targets: targets("g-old", 0)}))
	mustSet(t, s, "exact-new", 5, spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("alias"), Targets: targets("new", 0)}))
	mustSet(t, s, "exact-old", 3, spec(
		v1alpha2.InferenceModelRewriteRule{Matches: exact("other", "alias"), Targets: targets("old-first", 0)},
		v1alpha2.InferenceModelRewriteRule{Matches: exact("alias"), Targets: targets("old-second", 0)}))
	mustSet(t, s, "generic-new", 9, spec(v1alpha2.InferenceModelRewriteRule{Targets: targets("g-new", 0)}))
	check := func(model, want, wantRewrite string) {
		t.Helper()
		got, rw, ok := s.Rewrite(model)
		if want == "" {
			if ok {
				t.Fatalf("Rewrite(%q) = %q from %s, want no rule", model, got, rw)
			}
			return
		}
		if !ok || got != want || rw != wantRewrite {
			t.Fatalf("Rewrite(%q) = %q from %q (%v), want %q from %q", model, got, rw, ok, want, wantRewrite)
		}
	}
	check("alias", "old-first", "exact-old")
	check("other", "old-first", "exact-old")
	check("unknown", "g-old", "generic-old")
	s.Delete("exact-old")
	check("alias", "new", "exact-new")
	s.Delete("generic-old")
	check("unknown", "g-new", "generic-new")
	s.Delete("generic-new")
	check("unknown", "", "")
	// Same creation time: the lower name first.
	mustSet(t, s, "b", 5, spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("alias"), Targets: targets("from-b", 0)}))
	mustSet(t, s, "a", 5, spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("alias"), Targets: targets("from-a", 0)}))
	s.Delete("exact-new")
	check("alias", "from-a", "a")
	// An invalid replacement removes the old rules.
	if err := s.Set("a", time.Unix(5, 0), spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("alias")})); err == nil {
		t.Fatal("a rule without targets was accepted")
	}
	check("alias", "from-b", "b")
}

// TestWeightedSplit: over n = 20,000 seeded draws each target's share is within 5 standard
// deviations of weight/Σweights (a false-failure probability below 1e-6 per target for a
// correct sampler); targets without weights share evenly.
func TestWeightedSplit(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name    string
		targets []v1alpha2.TargetModel
		want    map[string]float64
	}{
		{"1:3", targets("a", 1, "b", 3), map[string]float64{"a": 0.25, "b": 0.75}},
		{"70:20:10", targets("a", 70, "b", 20, "c", 10), map[string]float64{"a": 0.7, "b": 0.2, "c": 0.1}},
		{"unweighted", targets("a", 0, "b", 0), map[string]float64{"a": 0.5, "b": 0.5}},
		{"one target", targets("only", 1000000), map[string]float64{"only": 1}},
	} {
		const seed = 42
		s := NewStore(seed)
		mustSet(t, s, "r", 0, spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("m"), Targets: tc.targets}))
		counts := map[string]int{}
		for range n {
			got, _, ok := s.Rewrite("m")
			if !ok {
				t.Fatal("no rewrite")
			}
			counts[got]++
		}
		for model, p := range tc.want {
			share := float64(counts[model]) / n
			bound := 5 * math.Sqrt(p*(1-p)/n)
			if math.Abs(share-p) > bound {
				t.Errorf("%s (seed %d): %s got %d of %d (%.4f), want %.4f ± %.4f", tc.name, seed, model, counts[model], n, share, p, bound)
			}
		}
		if len(counts) != len(tc.want) {
			t.Errorf("%s: targets drawn %v", tc.name, counts)
		}
	}
}

func TestValidate(t *testing.T) {
	other := v1alpha2.MatchValidationType("Prefix")
	for _, tc := range []struct {
		rule v1alpha2.InferenceModelRewriteRule
		want string
	}{
		{v1alpha2.InferenceModelRewriteRule{Matches: exact("m")}, "spec.rules[0].targets: at least one target"},
		{v1alpha2.InferenceModelRewriteRule{Targets: targets("", 0)}, "spec.rules[0].targets[0].modelRewrite: required"},
		{v1alpha2.InferenceModelRewriteRule{Targets: targets("a", 1, "b", 0)}, "spec.rules[0].targets[1].weight: set a weight on every target"},
		{v1alpha2.InferenceModelRewriteRule{Targets: targets("a", 0, "b", 2)}, "spec.rules[0].targets[1].weight: set a weight on every target"},
		{v1alpha2.InferenceModelRewriteRule{Targets: targets("a", 1000001)}, "spec.rules[0].targets[0].weight: 1000001 is outside [1, 1000000]"},
		{v1alpha2.InferenceModelRewriteRule{Targets: targets("a", -1)}, "spec.rules[0].targets[0].weight: -1 is outside"},
		{v1alpha2.InferenceModelRewriteRule{Matches: []v1alpha2.Match{{}}, Targets: targets("a", 0)}, "spec.rules[0].matches[0].model: required"},
		{v1alpha2.InferenceModelRewriteRule{Matches: exact(""), Targets: targets("a", 0)}, "spec.rules[0].matches[0].model.value: must not be empty"},
		{v1alpha2.InferenceModelRewriteRule{Matches: []v1alpha2.Match{{Model: &v1alpha2.ModelMatch{Value: "m", Type: &other}}}, Targets: targets("a", 0)},
			`spec.rules[0].matches[0].model.type: "Prefix" is not supported`},
	} {
		err := Validate(spec(tc.rule))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.rule, err, tc.want)
		}
	}
	if err := Validate(spec(v1alpha2.InferenceModelRewriteRule{Matches: exact("m"), Targets: targets("a", 1, "b", 1000000)})); err != nil {
		t.Errorf("valid rule refused: %v", err)
	}
}

func TestParse(t *testing.T) {
	good := `# rewrites for the static pool
rules:
- matches:
  - model: {value: example-alias}
  targets:
  - {modelRewrite: lora-a, weight: 90}
  - {modelRewrite: lora-b, weight: 10}
---
poolRef: {name: ignored}
rules:
- targets: [{modelRewrite: base}]
`
	rws, err := Parse([]byte(good), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(rws) != 2 || rws[0].Name != "r.yaml[0]" || rws[1].Name != "r.yaml[1]" || rws[0].Spec.Rules[0].Targets[1].Weight != 10 {
		t.Fatalf("parsed %+v", rws)
	}
	for _, tc := range []struct{ doc, want string }{
		{"rules:\n- targets: [{modelRewrite: a, wieght: 1}]\n", "r.yaml: document 0: spec.rules[0].targets[0].wieght: unknown field"},
		{"rules:\n- targets: [{modelRewrite: a, Weight: 1}]\n", "spec.rules[0].targets[0].Weight: unknown field"},
		{"rules:\n- targets: [{modelRewrite: a, weight: heavy}]\n", "spec.rules[0].targets[0].weight: must be an integer"},
		{"rules:\n- targets: [{modelRewrite: a, weight: 1.5}]\n", "spec.rules[0].targets[0].weight: must be an integer"},
		{"rules:\n- targets: [{modelRewrite: a, weight: 4294967296}]\n", "spec.rules[0].targets[0].weight: 4.294967296e+09 is out of range"},
		{"rules:\n- matches: [{model: m}]\n  targets: [{modelRewrite: a}]\n", "spec.rules[0].matches[0].model: must be an object"},
		{"rules: {}\n", "spec.rules: must be a list"},
		{"rules:\n- targets: []\n", "spec.rules[0].targets: at least one target"},
		{"rules:\n- targets: [{modelRewrite: a}]\n---\nrules:\n- matches: [{model: {value: ''}}]\n  targets: [{modelRewrite: a}]\n", "r.yaml: document 1: spec.rules[0].matches[0].model.value"},
		{"rules: [\n", "r.yaml: document 0: not YAML"},
		{"rules:\n- targets: [{modelRewrite: a}]\nrules: []\n", "not YAML"},
	} {
		if _, err := Parse([]byte(tc.doc), "r.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.doc, err, tc.want)
		}
	}
	if rws, err := Parse([]byte("# nothing\n---\n"), "r.yaml"); err != nil || len(rws) != 0 {
		t.Errorf("empty documents: %v %v", rws, err)
	}
}

// FuzzParse: Parse never panics, and whatever it accepts the store accepts.
func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n- matches: [{model: {value: a}}]\n  targets: [{modelRewrite: b, weight: 3}]\n"))
	f.Add([]byte("rules:\n- targets: [{modelRewrite: b}]\n---\nrules: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rws, err := Parse(data, "f")
		if err != nil {
			return
		}
		s := NewStore(1)
		for _, rw := range rws {
			if err := s.Set(rw.Name, time.Time{}, &rw.Spec); err != nil {
				t.Fatalf("Parse accepted what Set refuses: %v", err)
			}
		}
	})
}
