package importrules

import (
	"bufio"
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/eppkit/eppkit"

// allowed maps a room of the tree to the rooms its production code may import, directly or
// through its imports. A room is a directory and everything below it, except the rooms of
// single packages in onePackage. A package belongs to the narrowest room that holds it
// (selfcheck/mutant before selfcheck); a room imports itself freely. Rooms missing here (suites,
// cmd, examples) import anything.
var allowed = map[string][]string{
	"internal":         {"internal"},
	"selfcheck/mutant": {},
	"reference":        {"reference", "internal", "selfcheck/mutant"},
	"fakes":            {"fakes", "internal"},
	"manifests":        {"internal"},
	"conformance":      {"conformance", "fakes", "internal", "manifests"},
	"bench":            {"bench", "conformance", "fakes", "reference", "selfcheck/mutant", "internal", "manifests"},
	"selfcheck":        {"selfcheck", "selfcheck/mutant", "conformance", "fakes", "reference", "internal", "manifests"},
}

// onePackage are the rooms that hold one package and not the packages below it: the mutant
// catalogue and switch, which reference/ imports for its hooks, without the mutant matrix and
// wrappers below it.
var onePackage = map[string]bool{"selfcheck/mutant": true}

// under reports whether pkg (a path relative to the module) is in room.
func under(pkg, room string) bool {
	return pkg == room || (!onePackage[room] && strings.HasPrefix(pkg, room+"/"))
}

// roomOf returns the narrowest room of allowed that holds pkg, or "" when none does.
func roomOf(pkg string) string {
	best := ""
	for room := range allowed {
		if under(pkg, room) && len(room) > len(best) {
			best = room
		}
	}
	return best
}

// violations returns one message per import of deps that pkg's room does not allow (all paths
// relative to the module).
func violations(pkg string, deps []string) []string {
	room := roomOf(pkg)
	if room == "" {
		return nil
	}
	var out []string
	for _, d := range deps {
		if dr := roomOf(d); dr != room && !contains(allowed[room], dr) {
			out = append(out, pkg+" imports "+d+" (directly or through its imports): "+room+"/ may import only "+describe(room))
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func describe(room string) string {
	a := append([]string(nil), allowed[room]...)
	if len(a) == 0 {
		return "the standard library and other modules (nothing of ours)"
	}
	sort.Strings(a)
	return strings.Join(a, ", ") + " (docs/architecture.md, import rules)"
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
	checked := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		var deps []string
		for _, d := range f[1:] {
			if rel, ok := strings.CutPrefix(d, module+"/"); ok {
				deps = append(deps, rel)
			}
		}
		if room := roomOf(pkg); room != "" {
			checked[room]++
		}
		for _, v := range violations(pkg, deps) {
			t.Error(v)
		}
	}
	for room := range allowed {
		if checked[room] == 0 {
			t.Errorf("no package of %s/ was checked: go list did not list the tree, or the room is gone", room)
		}
	}
}

// TestViolations checks the rule itself on planted imports, so a rule that can no longer fail is
// caught here rather than trusted.
func TestViolations(t *testing.T) {
	cases := []struct {
		pkg, dep string
		bad      bool
	}{
		{"internal/percentile", "conformance/harness", true},
		{"internal/toolcache", "internal/hostinfo", false},
		{"internal/version", "cmd/eppkit", true},
		{"reference/framework", "selfcheck/mutant", false},
		{"reference/framework", "selfcheck/mutant/wrap", true},
		{"reference/director", "conformance", true},
		{"reference/director", "fakes/vllm", true},
		{"selfcheck/mutant", "reference/framework", true},
		{"conformance/harness", "bench", true},
		{"conformance/harness", "selfcheck/flakecheck", true},
		{"conformance/harness", "fakes/gateway", false},
		{"fakes/gateway", "conformance/harness", true},
		{"bench/sim", "selfcheck/mutant/matrix", true},
		{"bench/sim", "reference/director", false},
		{"selfcheck/mutant/matrix", "conformance", false},
		{"selfcheck/flakecheck", "bench", true},
		{"suites/dag", "selfcheck/mutant/wrap", false},
	}
	for _, c := range cases {
		got := len(violations(c.pkg, []string{c.dep})) > 0
		if got != c.bad {
			t.Errorf("%s importing %s: violation = %v, want %v", c.pkg, c.dep, got, c.bad)
		}
	}
}
