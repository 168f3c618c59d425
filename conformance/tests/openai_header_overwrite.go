package tests

import (
	"slices"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/eppkit/eppkit/conformance"
	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

// forgedDestination is what a client sends as x-gateway-destination-endpoint in
// OpenAIHeaderOverwrite: an address outside every pool (TEST-NET-1).
const forgedDestination = "192.0.2.1:8000"

func init() {
	conformance.Register(conformance.ConformanceTest{
		ShortName: "OpenAIHeaderOverwrite",
		Description: "Every request header the EPP sets MUST replace any value the request already carried: for a request that " +
			"arrives with a forged x-gateway-destination-endpoint and a wrong Content-Length, applying the EPP's header mutation " +
			"with Envoy's append_action semantics MUST leave exactly one value of each header it set (its own), never the " +
			"client's value beside it.",
		Level:         conformance.LevelEppkit,
		Profile:       conformance.ProfileEPPProduction,
		Features:      []conformance.Feature{conformance.FeatureRequestHeaderOverwrite},
		Preconditions: []string{"the EPP sets the pick as the request header x-gateway-destination-endpoint (the protocol also allows metadata only)"},
		Source: "SPEC §9.3 [eppkit]: append_action OVERWRITE_IF_EXISTS_OR_ADD; envoy config/core/v3/base.proto " +
			"HeaderValueOption.append_action (default APPEND_IF_EXISTS_OR_ADD); agentgateway #905. No upstream EPP has " +
			"done it: llm-d-router v0.10.0 pkg/epp/handlers/request.go generateHeaders sets no append_action, so with " +
			"append_action semantics the client's value stays beside the EPP's; the same in GIE v1.5.0. A production rule " +
			"(EPP-Production) since December 2026, when [upstream] came to mean llm-d-router v0.10.0.",
		Run: runOpenAIHeaderOverwrite,
	})
}

func runOpenAIHeaderOverwrite(t harness.TestingT, s *harness.Suite) {
	c := s.ExtProc(t)
	r := s.Rand(t)
	setAny, setPick := false, false
	for i, path := range []string{pathCompletions, pathChat} {
		body := completionBody(s.ModelName, uniquePrompt(s, t, r, 12), nil)
		if path == pathChat {
			body = chatBody(s.ModelName, uniquePrompt(s, t, r, 12))
		}
		req := surfaceRequest(path, body, map[string]string{
			extprocclient.DestinationKey: forgedDestination,
			"content-length":             "1",
		})
		d := exchange(t, s, c, req)
		pick := mustRoute(t, s, d, req)
		var hm *extprocv3.HeaderMutation
		if len(d.Responses) > 0 {
			hm = d.Responses[0].GetRequestHeaders().GetResponse().GetHeaderMutation()
		}
		headers := extprocclient.HeaderList(slices.Clone(req.Headers))
		rep, err := extprocclient.ApplyHeaderMutation(&headers, hm, extprocclient.SemanticsAppendAction)
		if err != nil {
			t.Fatalf("request %d (%s): the EPP's header mutation cannot be applied: %v", i, describe(req), err)
		}
		var set []string
		for _, opt := range hm.GetSetHeaders() {
			if name := strings.ToLower(opt.GetHeader().GetKey()); !slices.Contains(set, name) {
				set = append(set, name)
			}
		}
		for _, name := range set {
			if vals := headers.Values(name); len(vals) != 1 {
				t.Fatalf("request %d (%s): after the EPP's mutation the request carries %d values of %s: %q "+
					"(the EPP appended instead of overwriting: append_action must be OVERWRITE_IF_EXISTS_OR_ADD)",
					i, describe(req), len(vals), name, vals)
			}
		}
		setAny = setAny || len(set) > 0
		if slices.Contains(set, extprocclient.DestinationKey) {
			setPick = true
			if got := headers.Values(extprocclient.DestinationKey)[0]; got != strings.Join(pick, ",") {
				t.Fatalf("request %d: %s is %q after the mutation, want the pick %q", i, extprocclient.DestinationKey, got, pick)
			}
		}
		if slices.Contains(set, "content-length") && d.Body != nil {
			if got := headers.Values("content-length")[0]; got != strconv.Itoa(len(d.Body)) {
				t.Fatalf("request %d: Content-Length %q after the mutation, the forwarded body is %d bytes", i, got, len(d.Body))
			}
		}
		t.Logf("request %d: headers set %v, each with one value after the mutation (%v touched)", i, set, rep.Touched)
	}
	if !setPick {
		// A metadata-only pick is valid by the protocol: the rule has nothing to check on the pick
		// (the headers it did set, if any, were checked above).
		what := "no request header at all"
		if setAny {
			what = "other headers, each checked above, but not the pick"
		}
		harness.NotApplicable(t, "the EPP sets the pick as the request header "+extprocclient.DestinationKey,
			"it returned the pick as dynamic metadata only and set %s", what)
	}
}
