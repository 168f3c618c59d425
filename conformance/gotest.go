package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RunTest runs the conformance suite from an implementation's own `go test`, as gateway-api's
// RunConformanceWithOptions does: it starts the harness around the target opts names, runs every
// test of the selected profiles as a subtest named after its ShortName (a failed conformance test
// fails its subtest with the first failure and the test's log; a skipped one skips it with the
// reason), then writes the same reports as `eppkit conformance` (opts.ReportDir, PublishDir,
// ResultsFile). `go test -run 'TestEPP/PrefixCacheAffinity'` runs one test; the others are then
// reported skipped with NotRunMessage. t fails when the harness cannot start, when a report cannot
// be written, and — with opts.ExpectFailures — when the failures differ from the expected ones
// (the listed tests' subtests still fail, so their messages stay visible).
//
// The tests must be registered: import _ "github.com/eppkit/eppkit/conformance/tests". The
// console lines (opts.Out, when nil) go to t.Log.
func RunTest(t *testing.T, opts Options) {
	t.Helper()
	if opts.Out == nil {
		opts.Out = &testLogWriter{t: t}
	}
	if opts.Err == nil {
		opts.Err = opts.Out
	}
	pkg := goTestPackage()
	repro := func(ct ConformanceTest, seed int64) string { return goTestRepro(t.Name(), ct.ShortName, pkg, seed) }
	if opts.PublishDir != "" && len(opts.Reproduce) == 0 {
		opts.Reproduce = []string{fmt.Sprintf("go test -count=1 -run '^%s$' %s  # from the module that holds the test", t.Name(), pkg)}
	}
	s, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	s.reproduce, s.quiet = repro, true
	for _, ct := range s.Tests() {
		if s.p.sel.NotSupported(ct) {
			// Counted as not supported in the reports, as on the CLI: no subtest.
			continue
		}
		t.Run(ct.ShortName, func(t *testing.T) {
			res := s.RunOne(ct)
			if log := subtestLog(res); log != "" {
				t.Log("\n" + log)
			}
			switch res.Outcome {
			case Skipped:
				t.Skip(res.Message)
			case Failed:
				t.Fatalf("%s\nrule: %s\nreproduce: %s", res.Message, ct.Description, repro(ct, s.Seed()))
			}
		})
	}
	_, err = s.Finish()
	var ee *ExitError
	if err != nil && !(errors.As(err, &ee) && ee.Code == ExitTestFailed && opts.ExpectFailures == "") {
		// A failed test already failed its subtest; anything else fails t here.
		t.Errorf("conformance: %v", err)
	}
}

// testLogWriter sends each complete line written to it to t.Log.
type testLogWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // no newline yet: keep it for the next write
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}

// goTestPackage is the package of the running go test as the go command names it from its
// module's root ("./examples/gotest", or "." at the root); "." when the module is not found.
func goTestPackage() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}

// goTestRepro is the command that reruns one conformance test of a RunTest-driven go test alone
// with the run's seed.
func goTestRepro(testName, shortName, pkg string, seed int64) string {
	return fmt.Sprintf("EPPKIT_SEED=%d go test -count=1 -run '^%s$/^%s$' %s", seed, testName, shortName, pkg)
}

// subtestLog is what a RunTest subtest logs of a result: its log without the failure message and
// the runner's reproduction line, which the subtest's Fatalf prints once.
func subtestLog(res TestResult) string {
	log := res.Log
	if res.Message != "" {
		log = strings.Replace(log, res.Message+"\n", "", 1)
	}
	if first, rest, ok := strings.Cut(log, "\n"); ok && strings.HasPrefix(first, "seed ") && strings.Contains(first, "reproduce: ") {
		log = rest
	}
	return strings.TrimRight(log, "\n")
}
