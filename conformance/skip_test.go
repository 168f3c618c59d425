package conformance

import (
	"strings"
	"testing"

	"github.com/eppkit/eppkit/conformance/harness"
)

func TestRunnerSkip(t *testing.T) {
	cleaned := false
	tests := []ConformanceTest{
		{ShortName: "Skips", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) {
			t.Cleanup(func() { cleaned = true })
			harness.Skip(t, "source %s cannot do it", "static")
			panic("ran past Skip")
		}},
		{ShortName: "FailsThenSkips", Profile: ProfileEPP, Level: LevelMUST, Run: func(t harness.TestingT, _ *harness.Suite) {
			t.Errorf("broken first")
			harness.Skip(t, "too late")
		}},
	}
	res := (&Runner{Selection: Selection{Profiles: Profiles}}).Run(tests)
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	if res[0].Outcome != Skipped || res[0].Message != "not applicable: source static cannot do it" || !cleaned {
		t.Errorf("Skips: outcome %s, message %q, cleanup ran %v; want skipped with the reason and cleanups run", res[0].Outcome, res[0].Message, cleaned)
	}
	if res[1].Outcome != Failed || !strings.Contains(res[1].Message, "broken first") {
		t.Errorf("FailsThenSkips: outcome %s %q; a failed test stays failed", res[1].Outcome, res[1].Message)
	}
}

// notSkipper is a TestingT without Skipf: Skip must fail it, never pass it silently.
type notSkipper struct {
	harness.TestingT
}

func TestSkipWithoutSkipperFails(t *testing.T) {
	rt := harness.NewRecorder("x")
	tt := notSkipper{rt}
	done := make(chan struct{})
	go func() {
		defer close(done)
		harness.Skip(tt, "no pool editor")
	}()
	<-done
	if rec := rt.Record(); !rec.Failed || rec.Skipped || !strings.Contains(rec.FirstFailure, "precondition not met") {
		t.Fatalf("Skip on a TestingT without Skipf: failed %v, skipped %v, %q", rec.Failed, rec.Skipped, rec.FirstFailure)
	}
}

func TestRunAloneCommand(t *testing.T) {
	for _, tc := range []struct {
		ct   ConformanceTest
		want string
	}{
		{ConformanceTest{ShortName: "A", Profile: ProfileEPP}, "eppkit conformance --target reference --profiles EPP --run-test A"},
		{ConformanceTest{ShortName: "B", Profile: ProfileEPP, EndpointSource: "apiserver"}, "eppkit conformance --target reference --profiles EPP --run-test B --endpoint-source apiserver"},
		{ConformanceTest{ShortName: "C", Profile: ProfileReference}, "eppkit conformance --target reference --profiles Reference --run-test C --config-file " + RunAloneConfig},
	} {
		if got := RunAloneCommand(tc.ct); got != tc.want {
			t.Errorf("RunAloneCommand(%s) = %q, want %q", tc.ct.ShortName, got, tc.want)
		}
	}
}
