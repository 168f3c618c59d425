package matrix

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/selfcheck/mutant"
	"github.com/eppkit/eppkit/selfcheck/mutant/interceptor"
	"github.com/eppkit/eppkit/selfcheck/mutant/wrap"
)

// TestEveryMutantLivesWhereTheCatalogueSays: the catalogue's Via of every mutant matches the
// package that implements it, and the hooks in reference/ are exactly the Hook mutants (at most
// three sites, each with a comment saying why no wrapper reaches it).
func TestEveryMutantLivesWhereTheCatalogueSays(t *testing.T) {
	byVia := map[mutant.Via][]mutant.Name{}
	for _, m := range mutant.Catalogue() {
		byVia[m.Via] = append(byVia[m.Via], m.Name)
	}
	for via, impl := range map[mutant.Via][]mutant.Name{
		mutant.Interceptor:        interceptor.Mutants(),
		mutant.Plugin:             wrap.PluginMutants(),
		mutant.EndpointSource:     wrap.EndpointMutants(),
		mutant.MetricsSource:      wrap.MetricsMutants(),
		mutant.ModelRewriteSource: wrap.RewriteMutants(),
	} {
		want := slices.Sorted(slices.Values(byVia[via]))
		got := slices.Sorted(slices.Values(impl))
		if !slices.Equal(got, want) {
			t.Errorf("%s: implemented %v, catalogue says %v", via, got, want)
		}
	}

	// The hooks: `mutant.On(mutant.X)` in non-test files of reference/, one line per site.
	hookRE := regexp.MustCompile(`mutant\.On\(mutant\.(\w+)\)`)
	var sites []string
	hooked := map[string]bool{}
	err := filepath.WalkDir("../../../reference", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			found := hookRE.FindAllStringSubmatch(line, -1)
			if len(found) == 0 {
				continue
			}
			sites = append(sites, path+":"+strings.TrimSpace(line))
			for _, mm := range found {
				hooked[mm[1]] = true
			}
			if above := strings.Join(lines[max(0, i-4):i], "\n"); !strings.Contains(above, "wrapper") {
				t.Errorf("%s:%d: a mutant hook without a comment saying why no wrapper reaches it", path, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) > 3 {
		t.Errorf("%d mutant hook sites in reference/, want at most 3:\n%s", len(sites), strings.Join(sites, "\n"))
	}
	if len(hooked) != len(byVia[mutant.Hook]) {
		t.Errorf("reference/ hooks %d mutants (%v), the catalogue lists %d hook mutants (%v)", len(hooked), hooked, len(byVia[mutant.Hook]), byVia[mutant.Hook])
	}
}

func TestVerdict(t *testing.T) {
	kv, _ := mutant.Lookup(mutant.KVIgnored)
	m := &matrix{registered: map[string]bool{"KVCacheAwareness": true}}
	base := run{passed: []string{"KVCacheAwareness", "EPPHealth"}}
	for _, tc := range []struct {
		name    string
		run     run
		base    run
		reg     map[string]bool
		want    string
		wantEsc bool
	}{
		{"caught", run{mutant: kv, failed: []string{"KVCacheAwareness"}}, base, m.registered, "**yes**", false},
		{"escaped", run{mutant: kv, failed: []string{"EPPHealth"}}, base, m.registered, "**NO**", true},
		{"pending", run{mutant: kv}, base, map[string]bool{}, "pending", false},
		{"baseline failed the target", run{mutant: kv}, run{passed: []string{"EPPHealth"}, failed: []string{"KVCacheAwareness"}}, m.registered, "not judged: the targeted test failed", false},
		{"baseline skipped the target", run{mutant: kv}, run{passed: []string{"EPPHealth"}, skipped: []string{"KVCacheAwareness"}}, m.registered, "not judged: the targeted test was skipped", false},
		{"baseline broken", run{mutant: kv}, run{problem: "exit 2"}, m.registered, "not judged: the baseline", false},
		{"run broken", run{mutant: kv, problem: "exit 2"}, base, m.registered, "not judged", false},
	} {
		m.registered = tc.reg
		r := tc.run
		if v, skip := m.prejudge(r, tc.base); skip {
			r.verdict = v
		}
		got, esc := verdict(r)
		if !strings.HasPrefix(got, tc.want) || esc != tc.wantEsc {
			t.Errorf("%s: verdict %q escaped %v, want %q… escaped %v", tc.name, got, esc, tc.want, tc.wantEsc)
		}
	}
	w, _ := mutant.Lookup(mutant.DAGMapOrder)
	wbase := run{passed: []string{"X when y should sort them identically, by name then type, on every start"}}
	if got, _ := verdict(run{mutant: w, failed: wbase.passed}); got != "**yes**" {
		t.Errorf("white-box substring match: %q", got)
	}
}

// TestPlan: baselines first, one per lane and source; protocol mutants run behind the
// interceptor, in front of the reference and (when given) the upstream EPP; the others against
// the reference or their suite.
func TestPlan(t *testing.T) {
	m := &matrix{opts: Options{Source: "auto", Mutants: mutant.Catalogue(), Upstream: &Upstream{Name: "u"}}}
	plan := m.plan()
	var bases []string
	lanes := map[mutant.Name][]string{}
	for _, r := range plan {
		if r.mutant.Name == "" {
			bases = append(bases, r.key())
			continue
		}
		lanes[r.mutant.Name] = append(lanes[r.mutant.Name], r.key())
	}
	wantBases := []string{"interceptor → reference (apiserver)", "interceptor → reference (static)", "interceptor → upstream (apiserver)", "reference (apiserver)", "reference (static)",
		"suites/dag", "suites/equivalence", "suites/pluginstate"}
	if !slices.Equal(bases, wantBases) {
		t.Errorf("baselines %v, want %v", bases, wantBases)
	}
	for n, want := range map[mutant.Name][]string{
		mutant.BodyNotChunked: {"interceptor → reference (static)", "interceptor → upstream (apiserver)"},
		mutant.KVIgnored:      {"reference (static)"},
		mutant.NotReadyPicked: {"reference (apiserver)"},
		mutant.DAGMapOrder:    {"suites/dag"},
	} {
		if !slices.Equal(lanes[n], want) {
			t.Errorf("%s runs in %v, want %v", n, lanes[n], want)
		}
	}
}

// TestConformanceRunReadsTheResultsFile: a conformance run's outcomes come from the results file
// the child writes at --results-file, not from its console: the stand-in eppkit below prints a
// progress line that contradicts the file. Without a results file the run is a problem, never a
// run with no failures.
func TestConformanceRunReadsTheResultsFile(t *testing.T) {
	dir := t.TempDir()
	want := conformance.Results{APIVersion: conformance.ResultsAPIVersion, Kind: conformance.ResultsKind, ExitCode: 1,
		Tests: []conformance.TestRecord{
			{Profile: conformance.ProfileEPP, ShortName: "EPPHealth", Outcome: conformance.Passed},
			{Profile: conformance.ProfileEPP, ShortName: "KVCacheAwareness", Outcome: conformance.Failed, Message: "went to the full pod"},
			{Profile: conformance.ProfileEPP, ShortName: "LoRAAffinity", Outcome: conformance.Skipped, Message: "feature not claimed"},
		}}
	src := filepath.Join(dir, "want.json")
	if err := conformance.WriteResultsFile(src, want); err != nil {
		t.Fatal(err)
	}
	// The stand-in copies src to the path after --results-file unless NO_RESULTS is set.
	script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do\n  if [ \"$1\" = --results-file ] && [ -z \"$NO_RESULTS\" ]; then mkdir -p \"$(dirname \"$2\")\" && cp " +
		src + " \"$2\"; fi\n  shift\ndone\necho 'PASS EPP/KVCacheAwareness (1s)'\necho 'harness: done'\nexit 1\n"
	eppkit := filepath.Join(dir, "eppkit")
	if err := os.WriteFile(eppkit, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kv, _ := mutant.Lookup(mutant.KVIgnored)
	m := &matrix{opts: Options{Eppkit: eppkit, LogDir: filepath.Join(dir, "logs"), Log: io.Discard, Seed: 1}}
	if err := os.MkdirAll(m.opts.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := m.conformance(context.Background(), run{mutant: kv, lane: laneReference, source: "static"})
	if r.problem != "" || r.exitCode != 1 || !slices.Equal(r.passed, []string{"EPPHealth"}) ||
		!slices.Equal(r.failed, []string{"KVCacheAwareness"}) || !slices.Equal(r.skipped, []string{"LoRAAffinity"}) {
		t.Errorf("run from the results file: passed %v failed %v skipped %v exit %d problem %q; want EPPHealth / KVCacheAwareness / LoRAAffinity, exit 1",
			r.passed, r.failed, r.skipped, r.exitCode, r.problem)
	}
	if v, esc := verdict(r); v != "**yes**" || esc {
		t.Errorf("verdict %q escaped %v, want caught", v, esc)
	}

	t.Setenv("NO_RESULTS", "1")
	r = m.conformance(context.Background(), run{mutant: kv, lane: laneReference, source: "static"})
	if !strings.HasPrefix(r.problem, "no results file") || len(r.passed)+len(r.failed) != 0 {
		t.Errorf("without a results file: problem %q, passed %v failed %v; want a problem and no outcomes", r.problem, r.passed, r.failed)
	}
	if v, _ := verdict(r); !strings.HasPrefix(v, "not judged") {
		t.Errorf("without a results file the verdict is %q, want not judged", v)
	}
}

// TestMutantRunSelectsItsTargetedTest checks the arguments of the conformance runs: a baseline
// runs the whole registry; a mutant run selects its targeted test with --run-test, unless
// WholeRegistry is set.
func TestMutantRunSelectsItsTargetedTest(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > " + argsFile + "\nexit 1\n"
	eppkit := filepath.Join(dir, "eppkit")
	if err := os.WriteFile(eppkit, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kv, _ := mutant.Lookup(mutant.KVIgnored)
	for _, c := range []struct {
		name    string
		r       run
		whole   bool
		runTest bool
	}{
		{"baseline", run{lane: laneReference, source: "static"}, false, false},
		{"mutant", run{mutant: kv, lane: laneReference, source: "static"}, false, true},
		{"mutant, whole registry", run{mutant: kv, lane: laneReference, source: "static"}, true, false},
		{"upstream baseline", run{lane: laneUpstream, source: "apiserver"}, false, false},
		{"upstream mutant", run{mutant: kv, lane: laneUpstream, source: "apiserver"}, false, true},
	} {
		m := &matrix{opts: Options{Eppkit: eppkit, LogDir: filepath.Join(dir, "logs"), Log: io.Discard, Seed: 1, WholeRegistry: c.whole,
			Upstream: &Upstream{Name: "up", Command: "true", Args: []string{"--supported-features", "X", "--skip-tests", "Y"}}}}
		if err := os.MkdirAll(m.opts.LogDir, 0o755); err != nil {
			t.Fatal(err)
		}
		m.conformance(context.Background(), c.r)
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(string(b), "--run-test "+kv.Target+" ") || strings.HasSuffix(strings.TrimSpace(string(b)), "--run-test "+kv.Target)
		if got != c.runTest || (!c.runTest && strings.Contains(string(b), "--run-test")) {
			t.Errorf("%s: arguments %q; want --run-test %s: %v", c.name, strings.TrimSpace(string(b)), kv.Target, c.runTest)
		}
		// eppkit refuses --skip-tests beside --run-test: the upstream lane's skips go.
		if c.r.lane == laneUpstream && strings.Contains(string(b), "--skip-tests") == c.runTest {
			t.Errorf("%s: arguments %q; want --skip-tests only without --run-test", c.name, strings.TrimSpace(string(b)))
		}
	}
}

func TestWithoutFlag(t *testing.T) {
	got := withoutFlag([]string{"--a", "1", "--skip-tests", "X,Y", "--b", "--skip-tests=Z", "c"}, "--skip-tests")
	if want := []string{"--a", "1", "--b", "c"}; !slices.Equal(got, want) {
		t.Errorf("withoutFlag = %v, want %v", got, want)
	}
}
