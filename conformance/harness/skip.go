package harness

import (
	"fmt"
	"strings"
)

// Skipper is the part of testing.T (and ginkgo.GinkgoT()) that skips a test.
type Skipper interface {
	Skipf(format string, args ...any)
}

// NotApplicablePrefix starts the reason of every test that stopped itself because one of its
// preconditions is unmet: reports count it "not applicable" (never a failure), with the reason.
const NotApplicablePrefix = "not applicable: "

// NotApplicableReason returns reason with NotApplicablePrefix (unchanged when it has it).
func NotApplicableReason(reason string) string {
	if strings.HasPrefix(reason, NotApplicablePrefix) {
		return reason
	}
	return NotApplicablePrefix + reason
}

// NotApplicable stops t as not applicable: precondition — one of the test's Preconditions, as the
// catalogue states it — is not met by this EPP or this run, and detail (a format) says what the
// test saw. Use it when the rule has nothing to check (an EPP that sets no header cannot break
// the rule on how it sets headers; a static pool cannot change), never for behaviour the rule
// requires. Where t cannot skip it fails t with the reason (see Skip).
func NotApplicable(t TestingT, precondition, detail string, args ...any) {
	t.Helper()
	Skip(t, "%sprecondition not met: %s (%s)", NotApplicablePrefix, precondition, fmt.Sprintf(detail, args...))
}

// Skip stops t as skipped with the reason, when t can skip (the in-process runner's TestingT,
// testing.T, ginkgo.GinkgoT()); otherwise it fails t with the reason, so a precondition the
// harness cannot meet is never reported as a pass. The runner reports a test that skips itself as
// not applicable (NotApplicableReason); prefer NotApplicable, which names the precondition. Use
// it only for preconditions (the endpoint source cannot change the pool, the EPP lacks an optional
// behaviour the rule is about), never for the EPP's required behaviour.
func Skip(t TestingT, format string, args ...any) {
	t.Helper()
	if sk, ok := t.(Skipper); ok {
		sk.Skipf(format, args...)
		return
	}
	t.Fatalf("precondition not met (cannot skip here): "+format, args...)
}
