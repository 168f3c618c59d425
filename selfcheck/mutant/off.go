//go:build !eppkit_mutants

package mutant

// Enabled is false: this binary was built without the eppkit_mutants tag, so no mutant can be
// selected (the hooks guarded by it are dead code).
const Enabled = false

// On reports whether the mutant name is active: never, in this build.
func On(Name) bool { return false }

// Active returns the active mutant's name: always "" in this build.
func Active() Name { return "" }
