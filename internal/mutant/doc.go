// Package mutant selects deliberately broken variants ("mutants") of the reference EPP, for the
// mutant matrix (`make mutants`, reports/mutants.md): each mutant breaks exactly one rule, and the
// conformance test or white-box suite that targets that rule must fail against it. A test that
// still passes against the mutant of its rule cannot tell a correct EPP from an incorrect one.
//
// Mutants exist only in binaries built with the build tag eppkit_mutants
// (`go build -tags eppkit_mutants`). There, the environment variable EPPKIT_MUTANT names the one
// active mutant (read once, at the first call of On; an unknown name panics at once, listing the
// known ones). In every other build Enabled is the constant false and On always returns false, so
// the hooks in reference/ (`if mutant.Enabled && mutant.On(mutant.X) { ... }`) are removed by the
// compiler and no flag, file or variable can select a mutant.
//
// The hooks are one line each, in the reference package whose rule they break; Catalogue lists
// every mutant with the rule it breaks and the test that targets it.
package mutant

// Env is the environment variable that names the active mutant (tagged builds only).
const Env = "EPPKIT_MUTANT"
