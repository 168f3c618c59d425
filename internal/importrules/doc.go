// Package importrules holds only a test: the import rules of DESIGN.md, checked against the
// tree's production code (go list's transitive imports of every non-test package): reference/
// never imports conformance/ or suites/; conformance/ never imports reference/ (it drives EPPs
// through ext_proc, and the reference target is registered by internal/wiring); fakes/ import
// neither. Test files may cross them (a fake's test may use the reference's client as a real
// consumer of its API), since they are not part of what a user builds.
package importrules
