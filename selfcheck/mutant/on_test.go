//go:build eppkit_mutants

package mutant

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The tagged build reads EPPKIT_MUTANT once per process, so each case runs in a child process
// (this test binary re-run with -test.run and a marker variable).
func TestTaggedBuildSelectsFromEnv(t *testing.T) {
	if os.Getenv("EPPKIT_MUTANT_CHILD") == "1" {
		want := Name(os.Getenv("EPPKIT_MUTANT_WANT"))
		if got := Active(); got != want {
			t.Fatalf("Active() = %q, want %q", got, want)
		}
		for _, m := range Catalogue() {
			if On(m.Name) != (m.Name == want) {
				t.Fatalf("On(%q) = %v with %s=%q", m.Name, On(m.Name), Env, want)
			}
		}
		return
	}
	for _, tc := range []struct{ env, want string }{{"", ""}, {"none", ""}, {"kv-ignored", "kv-ignored"}, {" dag-map-order ", "dag-map-order"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTaggedBuildSelectsFromEnv$")
		cmd.Env = append(os.Environ(), "EPPKIT_MUTANT_CHILD=1", "EPPKIT_MUTANT_WANT="+tc.want, Env+"="+tc.env)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s=%q: %v\n%s", Env, tc.env, err, out)
		}
	}
}

func TestTaggedBuildRejectsUnknownName(t *testing.T) {
	if os.Getenv("EPPKIT_MUTANT_CHILD") == "2" {
		Active()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTaggedBuildRejectsUnknownName$")
	cmd.Env = append(os.Environ(), "EPPKIT_MUTANT_CHILD=2", Env+"=no-such-mutant")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown mutant") {
		t.Fatalf("want a panic naming the unknown mutant, got err %v:\n%s", err, out)
	}
}
