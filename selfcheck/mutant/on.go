//go:build eppkit_mutants

package mutant

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Enabled is true: this binary was built with the eppkit_mutants tag, and EPPKIT_MUTANT selects
// one mutant (empty or "none" = the unmodified reference).
const Enabled = true

var (
	activeOnce sync.Once
	active     Name
)

// On reports whether name is the active mutant.
func On(name Name) bool { return Active() == name }

// Active returns the active mutant's name ("" = none). It reads EPPKIT_MUTANT once and panics
// when the name is not in Catalogue: a typo must not run the unmodified reference by mistake.
func Active() Name {
	activeOnce.Do(func() {
		v := strings.TrimSpace(os.Getenv(Env))
		if v == "" || v == "none" {
			return
		}
		if _, ok := Lookup(Name(v)); !ok {
			panic(fmt.Sprintf("%s=%q: unknown mutant (known: %s)", Env, v, strings.Join(Names(), ", ")))
		}
		active = Name(v)
	})
	return active
}
