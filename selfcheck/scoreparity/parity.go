// Package scoreparity compares the reference EPP's published scores with llm-d-router v0.10.0's,
// request by request (make interop-prefix-parity, interop-token-load-parity; reports in
// reports/interop/<study>-parity): both EPPs run one scorer under the same parameters, are given
// the same request history, and are asked to score the same probe; their per-endpoint scores
// (envoy.lb / x-gateway-destination-endpoint-scores, both with --emit-endpoint-scores) are compared
// endpoint by endpoint, and every difference is attributed to a named rule of its request kind, or
// reported as unexplained, which fails the check.
//
// It is black-box on both sides: llm-d-router is a binary built from its source snapshot
// (`eppkit tools build llmd-router`), never a library. Each EPP runs in a harness of its own (a
// fresh fake vLLM fleet of four endpoints on the static source, one after the other) and sees the
// same seeded workload, talked to over ext_proc directly (no gateway): the request history is
// steered with subset hints, which both EPPs honour. Prefix, TokenLoad and ActiveRequest are the
// studies; each says how its trials run.
package scoreparity

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/conformance/target"
	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
	"github.com/eppkit/eppkit/internal/toolcache"
)

// ScoresKey is the dynamic-metadata key, in namespace envoy.lb, of the per-endpoint scores both
// EPPs publish with --emit-endpoint-scores (llm-d-router v0.10.0 pkg/epp/metadata/consts.go,
// DestinationEndpointScoresKey).
const ScoresKey = "x-gateway-destination-endpoint-scores"

// fleetSize is the number of endpoints of each run's fleet.
const fleetSize = 4

// Class is one kind of request the check sends, with what it expects of the two EPPs' scores.
type Class struct {
	// Name names the class in the report (e.g. "completions-text").
	Name string
	// SameScores is true when the two EPPs must publish the same scores for this kind of
	// request; a difference then is unexplained and fails the check.
	SameScores bool
	// Rule says why the scores agree, or names the difference and where each side decides it.
	Rule string
}

// Options configure Run; each field names the `eppkit interop prefix-parity` flag it mirrors.
type Options struct {
	// LLMDRouter is llm-d-router v0.10.0's EPP binary (--llmd-router; "" = `eppkit tools path
	// llmd-router epp`).
	LLMDRouter string
	// Eppkit is the eppkit binary that runs the reference EPP ("" = this executable).
	Eppkit string
	// LogDir receives each run's harness and EPP logs and their configs (--log-dir; required).
	LogDir string
	// Report, when set, receives the Markdown summary (--report).
	Report string
	// Trials is the number of trials per class (--trials, ≥ 1).
	Trials int
	// Seed seeds the workload and the fakes (--seed; 0 = from the clock).
	Seed int64
	// Timeout bounds the whole check (--timeout).
	Timeout time.Duration
	// Out receives progress lines and the verdict; Logger the harnesses' logs (nil discards each).
	Out    io.Writer
	Logger *slog.Logger
}

// Trial is one class's prompt history and probe, with each EPP's scores of the probe by endpoint
// index (0..fleetSize-1).
type Trial struct {
	Class string
	// Index is the trial's number within its class (its prompt's text derives from it).
	Index int
	// Setup is what each endpoint was given before the probe: the fraction of the prompt it holds
	// (the prefix study) or the number of requests held in flight on it (the load studies).
	Setup [fleetSize]float64
	// Scores are the probe's scores by endpoint index: [0] the reference, [1] llm-d-router.
	Scores [2][fleetSize]float64
}

// Differs reports whether the two EPPs' scores of the probe differ on any endpoint (beyond 1e-9).
func (t Trial) Differs() bool {
	for j := range fleetSize {
		if math.Abs(t.Scores[0][j]-t.Scores[1][j]) > 1e-9 {
			return true
		}
	}
	return false
}

// BestDiffers reports whether the endpoints with the highest score (all of them, on a tie) differ
// between the two EPPs: whether the difference can change the pick.
func (t Trial) BestDiffers() bool {
	best := func(s [fleetSize]float64) (set [fleetSize]bool) {
		top := slices.Max(s[:])
		for j, v := range s {
			set[j] = math.Abs(v-top) <= 1e-9
		}
		return set
	}
	return best(t.Scores[0]) != best(t.Scores[1])
}

// Study is one parity check: the configs both EPPs run, the request kinds, the workload and how a
// trial runs. Prefix, TokenLoad and ActiveRequest are the studies.
type Study struct {
	// Name names the study in progress lines and log directories, e.g. "prefix".
	Name string
	// Title is the report's heading; About its paragraph on how the study runs.
	Title, About string
	// Reference is the reference's EndpointPickerConfig; LLMDRouter llm-d-router's, with one %s
	// for the path of its file-discovery plugin's endpoints file.
	Reference, LLMDRouter string
	// Classes are the request kinds, in report order.
	Classes []Class
	// Workload returns n trials per class, in class order, from seed (the same for both EPPs).
	Workload func(seed int64, n int) []Trial
	// run sends trial t to one EPP (side 0 the reference, 1 llm-d-router) and sets t.Scores[side].
	run func(w *worker, t *Trial, side int) error
	// SetupLabel names Trial.Setup in the report ("shares", "held requests").
	SetupLabel string
	// Relative compares each endpoint's score less the probe's best score instead of the scores
	// themselves: a term the same on every endpoint (the probe's own tokens in the load studies)
	// cancels, and only what sets the endpoints apart is required to agree.
	Relative bool
}

// compared returns the trial as the study compares it: its scores, or, for a Relative study,
// each score less the best score of the same EPP.
func (st *Study) compared(t Trial) Trial {
	if !st.Relative {
		return t
	}
	for side := range t.Scores {
		top := slices.Max(t.Scores[side][:])
		for j := range t.Scores[side] {
			t.Scores[side][j] -= top
		}
	}
	return t
}

// Run runs the studies one after the other and writes their summaries, in order, to o.Report.
// Its error is a *conformance.ExitError: ExitTestFailed when a class whose
// scores must agree shows a difference, ExitHarness when a harness or EPP could not start or an
// EPP published no scores, ExitBadOptions for an invalid option.
func Run(ctx context.Context, o Options, studies ...*Study) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	bad := func(format string, a ...any) error {
		return &conformance.ExitError{Code: conformance.ExitBadOptions, Err: fmt.Errorf(format, a...)}
	}
	harnessErr := func(format string, a ...any) error {
		return &conformance.ExitError{Code: conformance.ExitHarness, Err: fmt.Errorf(format, a...)}
	}
	if o.Trials < 1 {
		return bad("--trials must be ≥ 1, got %d", o.Trials)
	}
	if o.LogDir == "" {
		return bad("--log-dir: required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.LLMDRouter == "" {
		p, err := toolcache.Path("llmd-router", "epp")
		if err != nil {
			return harnessErr("%v", err)
		}
		o.LLMDRouter = p
	}
	if _, err := os.Stat(o.LLMDRouter); err != nil {
		return harnessErr("--llmd-router: %v", err)
	}
	if o.Eppkit == "" {
		exe, err := os.Executable()
		if err != nil {
			return harnessErr("%v", err)
		}
		o.Eppkit = exe
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var summaries []string
	unexplained := 0
	for _, st := range studies {
		fmt.Fprintf(out, "%s parity: %d trials per class, %d classes, seed %d\n", st.Name, o.Trials, len(st.Classes), o.Seed)
		var scores [2][]Trial
		for side, name := range []string{"reference", "llm-d-router"} {
			trials, err := runSide(ctx, o, st, side, out)
			if err != nil {
				return harnessErr("%s parity, %s: %v (seed %d)", st.Name, name, err, o.Seed)
			}
			scores[side] = trials
		}
		trials := scores[0]
		for i := range trials {
			trials[i].Scores[1] = scores[1][i].Scores[1]
		}
		summary, n := Summarize(trials, o, st)
		fmt.Fprint(out, summary)
		summaries = append(summaries, summary)
		unexplained += n
	}
	if o.Report != "" {
		if err := os.MkdirAll(filepath.Dir(o.Report), 0o755); err != nil {
			return harnessErr("%v", err)
		}
		if err := os.WriteFile(o.Report, []byte(strings.Join(summaries, "\n")), 0o644); err != nil {
			return harnessErr("%v", err)
		}
	}
	if unexplained > 0 {
		return &conformance.ExitError{Code: conformance.ExitTestFailed,
			Err: fmt.Errorf("%d trial(s) of classes whose scores must agree differ (seed %d)", unexplained, o.Seed)}
	}
	return nil
}

// runSide starts a harness with one EPP (side 0 the reference, 1 llm-d-router) and runs every
// trial against it; the trials' Scores[side] are set.
func runSide(ctx context.Context, o Options, st *Study, side int, out io.Writer) ([]Trial, error) {
	name := []string{"reference", "llmd-router"}[side]
	dir, err := filepath.Abs(filepath.Join(o.LogDir, st.Name, name))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for i := 1; i <= fleetSize; i++ {
		endpoints = append(endpoints, fmt.Sprintf("%s%d:%d", fleet.DefaultIPPrefix, i, ports[0]))
	}
	configFile := filepath.Join(dir, "epp-config.yaml")
	var tmpl string
	switch side {
	case 0:
		if err := os.WriteFile(configFile, []byte(st.Reference), 0o644); err != nil {
			return nil, err
		}
		tmpl = target.ReferenceCommand
	case 1:
		epFile := filepath.Join(dir, "endpoints.yaml")
		var b strings.Builder
		b.WriteString("endpoints:\n")
		for i, ep := range endpoints {
			host, port, _ := strings.Cut(ep, ":")
			fmt.Fprintf(&b, "- name: ep%d\n  address: %q\n  port: %q\n", i, host, port)
		}
		if err := os.WriteFile(epFile, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(configFile, []byte(fmt.Sprintf(st.LLMDRouter, epFile)), 0o644); err != nil {
			return nil, err
		}
		// Flags: pkg/epp/server/options.go of its source; --pool-name only labels metrics in
		// file-discovery mode (Validate requires it).
		tmpl = "exec " + conformance.ShellQuote(o.LLMDRouter) + " --pool-name eppkit-pool --secure-serving=false --metrics-endpoint-auth=false " +
			"--tracing=false --drain-timeout=0s --emit-endpoint-scores --config-file {{.ConfigFile}} " +
			"--grpc-port {{.GRPCPort}} --grpc-health-port {{.HealthPort}} --metrics-port {{.MetricsPort}}"
	}
	tgt, err := target.NewCommandTarget(name, tmpl)
	if err != nil {
		return nil, err
	}
	src, err := conformance.NewEndpointSource("static")
	if err != nil {
		return nil, err
	}
	suite, err := harness.Start(ctx, harness.Config{Target: tgt, Source: src, ConfigFile: configFile, LogDir: dir,
		Seed: o.Seed, FleetSize: fleetSize, FleetPort: ports[0], Eppkit: o.Eppkit, NoPredictorSidecar: true, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("the harness could not start: %v", err)
	}
	defer suite.Close()
	if got := suite.Endpoints(); !slices.Equal(got, endpoints) {
		return nil, fmt.Errorf("the fleet is at %v, not %v (the check needs loopback aliases on %s0/24)", got, endpoints, fleet.DefaultIPPrefix)
	}
	fmt.Fprintf(out, "%s: %s ready: ext_proc %s, fleet %v\n", st.Name, name, suite.TargetAddress, endpoints)
	c, err := extprocclient.Dial(suite.TargetAddress, suite.TargetTLS)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := &worker{ctx: ctx, c: c, model: suite.ModelName, endpoints: endpoints, seed: o.Seed}
	trials := st.Workload(o.Seed, o.Trials)
	for i := range trials {
		if err := st.run(w, &trials[i], side); err != nil {
			return nil, fmt.Errorf("trial %d (%s): %v", i, trials[i].Class, err)
		}
	}
	return trials, nil
}

// worker sends a trial's requests to one EPP.
type worker struct {
	ctx       context.Context
	c         *extprocclient.Client
	model     string
	endpoints []string
	seed      int64
}

// request is one request of a trial: its path and body.
type request struct {
	path string
	body []byte
}

// classSeed is a stream number per class, from its name (FNV-1a).
func classSeed(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// approxProducer is approx-prefix-cache-producer as every study configures it: autoTune off and
// 64-token blocks (llm-d-router raises any smaller size to 64: approximateprefix/plugin.go,
// minBlockSizeTokens).
const approxProducer = `- type: approx-prefix-cache-producer
  parameters:
    autoTune: false
    blockSizeTokens: 64
`

// config is the EndpointPickerConfig of a study: plugins (YAML plugin entries) and
// max-score-picker, one profile running scorer with weight 1 and the picker. forLLMDRouter gives
// llm-d-router's: its API group, and its file-discovery plugin reading the endpoints file named by
// the one %s (pkg/epp/framework/plugins/datalayer/discovery/file/README.md).
func config(plugins, scorer string, forLLMDRouter bool) string {
	api, discovery, layer := "inference.networking.x-k8s.io/v1alpha1", "", ""
	if forLLMDRouter {
		api = "llm-d.ai/v1alpha1"
		discovery = "- type: file-discovery\n  parameters:\n    path: %s\n"
		layer = "dataLayer:\n  discovery:\n    pluginRef: file-discovery\n"
	}
	return "apiVersion: " + api + "\nkind: EndpointPickerConfig\nplugins:\n" + plugins + "- type: max-score-picker\n" + discovery + layer +
		"schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: " + scorer + "\n    weight: 1\n  - pluginRef: max-score-picker\n"
}

// probe sends q unhinted and records its scores, by endpoint index, as t.Scores[side]; scores
// that leave out an endpoint are an error.
func (w *worker) probe(q request, t *Trial, side int) error {
	s, err := w.send(q, nil)
	if err != nil {
		return fmt.Errorf("the probe: %v", err)
	}
	for j, ep := range w.endpoints {
		v, ok := s[ep]
		if !ok {
			return fmt.Errorf("the probe's scores %v name no %s", s, ep)
		}
		t.Scores[side][j] = v
	}
	return nil
}

// held is a request whose ext_proc stream stays open after its pick: the EPP counts it in
// flight until the stream ends (release).
type held struct {
	st     *extprocclient.Stream
	cancel context.CancelFunc
}

// release ends the stream.
func (h held) release() {
	h.st.Close()
	h.cancel()
}

// send sends q on a stream of its own, with the subset hint when hint is non-nil, ends the stream
// and returns the pick's published scores by endpoint. A refusal, a pick outside the hint or
// missing scores is an error.
func (w *worker) send(q request, hint []string) (map[string]float64, error) {
	h, scores, err := w.hold(q, hint)
	if err != nil {
		return nil, err
	}
	h.release()
	return scores, nil
}

// hold is send that leaves the stream open: the request stays in flight on its pick until
// h.release.
func (w *worker) hold(q request, hint []string) (held, map[string]float64, error) {
	sctx, scancel := context.WithCancel(w.ctx)
	st, err := w.c.Open(sctx)
	if err != nil {
		scancel()
		return held{}, nil, err
	}
	h := held{st: st, cancel: scancel}
	ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
	defer cancel()
	d, err := st.Exchange(ctx, extprocclient.Request{
		Headers:    extprocclient.RequestHeaders("POST", q.path, "eppkit-score-parity", q.body, map[string]string{"content-type": "application/json"}),
		Body:       q.body,
		SubsetHint: hint,
	})
	fail := func(err error) (held, map[string]float64, error) {
		h.release()
		return held{}, nil, err
	}
	if err != nil {
		return fail(err)
	}
	if d.Immediate != nil {
		return fail(fmt.Errorf("refused with %d: %s", d.Immediate.Status, strings.TrimSpace(string(d.Immediate.Body))))
	}
	if hint != nil && d.Pick() != hint[0] {
		return fail(fmt.Errorf("picked %q outside the subset hint %v", d.Pick(), hint))
	}
	scores, err := Scores(d.DynamicMetadata)
	if err != nil {
		return fail(err)
	}
	return h, scores, nil
}

// Scores reads envoy.lb / ScoresKey from a pick's dynamic metadata: endpoint (ip:port) → score.
// The error says what is missing or malformed.
func Scores(md *structpb.Struct) (map[string]float64, error) {
	ns := md.GetFields()[extprocclient.DestinationNamespace].GetStructValue()
	v, ok := ns.GetFields()[ScoresKey]
	if !ok {
		return nil, fmt.Errorf("the pick's dynamic metadata has no %s/%s (run the EPP with --emit-endpoint-scores)", extprocclient.DestinationNamespace, ScoresKey)
	}
	st := v.GetStructValue()
	if st == nil {
		return nil, fmt.Errorf("%s is not a struct", ScoresKey)
	}
	out := map[string]float64{}
	for k, e := range st.GetFields() {
		n, ok := e.GetKind().(*structpb.Value_NumberValue)
		if !ok {
			return nil, fmt.Errorf("%s[%s] is not a number", ScoresKey, k)
		}
		out[k] = n.NumberValue
	}
	return out, nil
}

// Summarize renders the Markdown summary of the compared trials and counts the trials of classes
// whose scores must agree that differ (unexplained differences).
func Summarize(trials []Trial, o Options, st *Study) (string, int) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", st.Title)
	fmt.Fprintf(&b, "Generated by `make interop-%s-parity` (`eppkit interop %s-parity`, selfcheck/scoreparity); do not edit by hand.\n\n", st.Name, st.Name)
	fmt.Fprintf(&b, "%s Each EPP runs on a fresh fleet of %d fake vLLM endpoints (static source; llm-d-router through its file-discovery plugin) "+
		"and publishes its scores with --emit-endpoint-scores. %d trials per class, seed %d.\n\n", st.About, fleetSize, o.Trials, o.Seed)
	b.WriteString("| Class | Trials | Scores differ | Best endpoint differs | Largest difference | Must agree | Verdict | Why |\n|---|---|---|---|---|---|---|---|\n")
	unexplained := 0
	for _, cl := range st.Classes {
		n, diff, bestDiff, largest := 0, 0, 0, 0.0
		for _, t := range trials {
			if t.Class != cl.Name {
				continue
			}
			t = st.compared(t)
			n++
			if t.Differs() {
				diff++
			}
			if t.BestDiffers() {
				bestDiff++
			}
			for j := range fleetSize {
				largest = max(largest, math.Abs(t.Scores[0][j]-t.Scores[1][j]))
			}
		}
		verdict := "agree"
		switch {
		case cl.SameScores && diff > 0:
			verdict = "**UNEXPLAINED**"
			unexplained += diff
		case !cl.SameScores && diff > 0:
			verdict = "differ, as the rule says"
		case !cl.SameScores:
			verdict = "no difference seen (the rule predicts one)"
		}
		must := "yes"
		if !cl.SameScores {
			must = "no"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.4f | %s | %s | %s |\n", cl.Name, n, diff, bestDiff, largest, must, verdict, conformance.MarkdownCell(cl.Rule))
	}
	fmt.Fprintf(&b, "\n## Trials that differ\n\nScores by endpoint (ep0..ep3), the reference first; %s by endpoint as set up before the probe.\n\n", st.SetupLabel)
	fmt.Fprintf(&b, "| Class | Trial | %s | Reference | llm-d-router |\n|---|---|---|---|---|\n", st.SetupLabel)
	shown := 0
	for _, t := range trials {
		if !st.compared(t).Differs() || shown >= 24 {
			continue
		}
		shown++
		fmt.Fprintf(&b, "| %s | %d | %v | %s | %s |\n", t.Class, t.Index, t.Setup, fmtScores(t.Scores[0]), fmtScores(t.Scores[1]))
	}
	if shown == 0 {
		b.WriteString("| — | | | | |\n")
	}
	fmt.Fprintf(&b, "\n**%d unexplained difference(s).**\n", unexplained)
	return b.String(), unexplained
}

func fmtScores(s [fleetSize]float64) string {
	parts := make([]string, fleetSize)
	for j, v := range s {
		parts[j] = fmt.Sprintf("%.4f", v)
	}
	return strings.Join(parts, " ")
}
