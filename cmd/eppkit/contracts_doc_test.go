package main

import (
	"os"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/conformance/harness"
)

// TestTemplateFieldFormatsDocumented: docs/contracts.md has a section for every --command
// template field (harness.TargetEnvFields) that states its Format, and its model rewrites example
// is the file a run writes (harness.ModelRewritesYAML).
func TestTemplateFieldFormatsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, f := range harness.TargetEnvFields {
		if f.Format == "" {
			t.Errorf("harness.TargetEnvFields: %s has no Format", f.Name)
			continue
		}
		head := "### `{{." + f.Name + "}}`\n"
		i := strings.Index(doc, head)
		if i < 0 {
			t.Errorf("docs/contracts.md has no section %q", strings.TrimSpace(head))
			continue
		}
		section := doc[i+len(head):]
		if j := strings.Index(section, "\n#"); j >= 0 {
			section = section[:j]
		}
		if !strings.Contains(section, "Format: "+f.Format+".") {
			t.Errorf("docs/contracts.md section {{.%s}} does not state its format %q", f.Name, f.Format)
		}
	}
	const marker = "<!-- model-rewrites-file:"
	i := strings.Index(doc, marker)
	if i < 0 {
		t.Fatalf("docs/contracts.md lacks the model rewrites example (%s)", marker)
	}
	block := doc[i:]
	block = block[strings.Index(block, "```yaml\n")+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	if block != string(harness.ModelRewritesYAML()) {
		t.Errorf("docs/contracts.md's model rewrites example differs from harness.ModelRewritesYAML():\n%s\nwant:\n%s", block, harness.ModelRewritesYAML())
	}
}
