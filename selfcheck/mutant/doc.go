// Package mutant is the catalogue of deliberately broken variants ("mutants") of an EPP, for the
// mutant matrix (`make mutants`, reports/mutants.md, driven by selfcheck/mutant/matrix): each
// mutant breaks exactly one rule, and the conformance test or white-box suite that targets that
// rule must fail against it. A test that still passes against the mutant of its rule cannot tell
// a correct EPP from an incorrect one.
//
// Mutants live outside the reference EPP's code (Via):
//   - protocol mutants in the ext_proc interceptor (selfcheck/mutant/interceptor), a proxy that stands in
//     front of any EPP — the reference, or the upstream EPP v1.5.0;
//   - plugin mutants as wrapper plugins, and endpoint- and metrics-source mutants as decorators
//     of those sources (selfcheck/mutant/wrap), applied to the reference by mutant builds only;
//   - at most three hooks left inside reference/ (`if mutant.Enabled && mutant.On(mutant.X)`),
//     where no wrapper reaches; each hook's comment says why.
//
// Mutant builds are binaries built with the tag eppkit_mutants (`go build -tags
// eppkit_mutants`). There, the environment variable EPPKIT_MUTANT names the one active mutant
// (read once, at the first call of Active or On; an unknown name panics at once, listing the
// known ones). In every other build Enabled is the constant false, Active returns "" and On
// false, so the hooks are removed by the compiler, nothing is wrapped, and no flag, file or
// variable can select a mutant.
package mutant

// Env is the environment variable that names the active mutant (tagged builds only).
const Env = "EPPKIT_MUTANT"
