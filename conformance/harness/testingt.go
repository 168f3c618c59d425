package harness

// TestingT is the part of testing.T a conformance test uses. ginkgo.GinkgoT() satisfies it, and so
// does the in-process runner's own implementation. Fatalf and FailNow stop the test (they do not
// return).
type TestingT interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Failed() bool
	Cleanup(func())
	Name() string
}
