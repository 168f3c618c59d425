package harness

// Skipper is the part of testing.T (and ginkgo.GinkgoT()) that skips a test.
type Skipper interface {
	Skipf(format string, args ...any)
}

// Skip stops t as skipped with the reason, when t can skip (the in-process runner's TestingT,
// testing.T, ginkgo.GinkgoT()); otherwise it fails t with the reason, so a precondition the
// harness cannot meet is never reported as a pass. Use it only for harness preconditions (the
// endpoint source cannot change the pool), never for the EPP's behaviour.
func Skip(t TestingT, format string, args ...any) {
	t.Helper()
	if sk, ok := t.(Skipper); ok {
		sk.Skipf(format, args...)
		return
	}
	t.Fatalf("precondition not met (cannot skip here): "+format, args...)
}
