package harness

import (
	"testing"

	"sigs.k8s.io/yaml"
)

// TestModelRewritesYAML: the file the harness gives a static EPP is valid YAML of the
// rewrite's rules (the reference parses it with reference/modelrewrite, which this package may not
// import; a conformance run with the static source loads it through --model-rewrites).
func TestModelRewritesYAML(t *testing.T) {
	var doc struct {
		Rules []struct {
			Matches []struct {
				Model struct{ Type, Value string } `json:"model"`
			} `json:"matches"`
			Targets []RewriteTarget `json:"targets"`
		} `json:"rules"`
	}
	if err := yaml.UnmarshalStrict(ModelRewritesYAML(), &doc); err != nil {
		t.Fatalf("ModelRewritesYAML: %v\n%s", err, ModelRewritesYAML())
	}
	if len(doc.Rules) != 1 || len(doc.Rules[0].Matches) != 1 || doc.Rules[0].Matches[0].Model.Value != ModelRewriteAlias ||
		len(doc.Rules[0].Targets) != len(ModelRewriteTargets()) {
		t.Fatalf("ModelRewritesYAML parsed to %+v", doc)
	}
}

// TestModelRewritesFileType: the file every run writes decodes strictly into ModelRewritesFile
// (the documented Go type) and says what the conformance rewrite says.
func TestModelRewritesFileType(t *testing.T) {
	var f ModelRewritesFile
	if err := yaml.UnmarshalStrict(ModelRewritesYAML(), &f); err != nil {
		t.Fatalf("ModelRewritesYAML does not decode strictly into ModelRewritesFile: %v\n%s", err, ModelRewritesYAML())
	}
	if len(f.Rules) != 1 || len(f.Rules[0].Matches) != 1 || f.Rules[0].Matches[0].Model.Type != "Exact" ||
		f.Rules[0].Matches[0].Model.Value != ModelRewriteAlias || len(f.Rules[0].Targets) != len(ModelRewriteTargets()) {
		t.Fatalf("decoded %+v", f)
	}
	for i, want := range ModelRewriteTargets() {
		if f.Rules[0].Targets[i] != want {
			t.Errorf("target %d: %+v, want %+v", i, f.Rules[0].Targets[i], want)
		}
	}
}
