package importrules

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/eppkit/eppkit"

// rules maps a tree of the module to the trees its production code must not import.
var rules = map[string][]string{
	"reference":   {"conformance", "suites"},
	"conformance": {"reference"},
	"fakes":       {"conformance", "reference"},
}

// under reports whether pkg is the module's dir or below it.
func under(pkg, dir string) bool {
	p := module + "/" + dir
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, deps := f[0], f[1:]
		for tree, banned := range rules {
			if !under(pkg, tree) {
				continue
			}
			checked++
			for _, d := range deps {
				for _, b := range banned {
					if under(d, b) {
						t.Errorf("%s imports %s (directly or through its imports): %s/ must not import %s/ (DESIGN.md import rules)",
							strings.TrimPrefix(pkg, module+"/"), strings.TrimPrefix(d, module+"/"), tree, b)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages: go list did not list the tree", checked)
	}
}
