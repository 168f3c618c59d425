// Package importrules holds only a test: the import rules of docs/architecture.md, checked
// against the tree's production code (go list's transitive imports of every non-test package).
// Each room of the tree may import only the rooms listed for it:
//
//	internal/            leaf utilities: nothing of ours but internal/
//	selfcheck/mutant     the mutant catalogue and switch: nothing of ours (reference/ imports it
//	                     for its hooks)
//	reference/           reference/, internal/, selfcheck/mutant
//	fakes/               fakes/, internal/
//	manifests            internal/
//	conformance/         conformance/, fakes/, internal/, manifests (never reference/: it drives
//	                     EPPs through ext_proc; the reference target is a command template
//	                     registered by conformance/wiring)
//	bench/               bench/, conformance/, fakes/, reference/ (and so selfcheck/mutant),
//	                     internal/, manifests; never the rest of selfcheck/
//	selfcheck/           selfcheck/, conformance/, fakes/, reference/, internal/, manifests
//	suites/, cmd/        anything of ours (nothing imports them)
//
// Test files may cross them (a fake's test may use the reference's client as a real consumer of
// its API), since they are not part of what a user builds.
package importrules
