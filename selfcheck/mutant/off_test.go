//go:build !eppkit_mutants

package mutant

import "testing"

// TestNormalBuildCannotSelectAMutant: without the eppkit_mutants tag, no value of EPPKIT_MUTANT
// activates a mutant (On is constant false, so the hooks in reference/ are dead code).
func TestNormalBuildCannotSelectAMutant(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled is true in a build without the eppkit_mutants tag")
	}
	for _, m := range Catalogue() {
		t.Setenv(Env, string(m.Name))
		if On(m.Name) || Active() != "" {
			t.Errorf("%s=%s selected mutant %q in a normal build", Env, m.Name, Active())
		}
	}
}
