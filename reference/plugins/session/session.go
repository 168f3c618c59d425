// Package session is the reference EPP's session affinity (SPEC §10; docs/request-surface.md
// §5): the plugin types session-affinity-filter (a hard pin) and session-affinity-scorer (a soft
// one), with llm-d-router v0.10.0's names, parameters and token
// (pkg/epp/framework/plugins/scheduling/filter/sessionaffinity,
// .../scorer/sessionaffinity and .../util/sessionaffinity).
//
// Strategy encoded_endpoint_header (upstream's default, the only one the reference implements):
// the response names the endpoint that served the request in a header (default x-session-token)
// as base64 (standard encoding) of the endpoint's id "<namespace>/<name>"; a client that sends
// the token back has its request pinned to that endpoint while it is a candidate. A token naming
// no candidate (the endpoint left the pool, or the subset hint or an earlier filter excluded it)
// leaves every candidate in place, and the response carries a new token for wherever the
// request went.
//
// Malformed tokens [eppkit]: a token header that is present but empty, or not standard base64,
// is refused with 400 naming the header (the plugins are admitters too). Upstream treats both as
// no session.
package session

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types and parameter values (upstream names).
const (
	// FilterType keeps only the session's endpoint when it is a candidate.
	FilterType = "session-affinity-filter"
	// ScorerType scores the session's endpoint 1 and every other 0.
	ScorerType = "session-affinity-scorer"
	// StrategyEncodedEndpointHeader carries the endpoint in a header the client echoes.
	StrategyEncodedEndpointHeader = "encoded_endpoint_header"
	// StrategySessionID binds a client-chosen session id to an endpoint on the server side;
	// upstream implements it, the reference refuses it at start.
	StrategySessionID = "session_id"
	// DefaultHeader carries the token when encodedEndpointHeaderConfig.header is empty.
	DefaultHeader = "x-session-token"
)

// Parameters are both plugins' parameters, upstream's field names (strictly decoded).
type Parameters struct {
	// Strategy is encoded_endpoint_header (default) or session_id (refused: not implemented).
	Strategy string `json:"strategy"`
	// EncodedEndpointHeaderConfig configures encoded_endpoint_header.
	EncodedEndpointHeaderConfig struct {
		// Header carries the token; default DefaultHeader; lower-cased and trimmed.
		Header string `json:"header"`
	} `json:"encodedEndpointHeaderConfig"`
	// SessionIDConfig is session_id's configuration, accepted so upstream configs decode; the
	// reference refuses the strategy itself.
	SessionIDConfig json.RawMessage `json:"sessionIdConfig,omitempty"`
	// ProfileName, when set, writes the first target of that profile instead of the endpoint
	// that served the request (upstream ResolvePodToWrite); a request the profile did not
	// schedule gets no token.
	ProfileName string `json:"profileName"`
}

// parse decodes and checks params; errors name the field.
func parse(raw json.RawMessage) (Parameters, error) {
	p := Parameters{Strategy: StrategyEncodedEndpointHeader}
	if err := framework.DecodeParameters(raw, &p); err != nil {
		return p, err
	}
	switch p.Strategy {
	case StrategyEncodedEndpointHeader:
	case StrategySessionID:
		return p, fmt.Errorf("parameters.strategy: %q is upstream's server-side binding, which the reference does not implement (use %q)",
			StrategySessionID, StrategyEncodedEndpointHeader)
	default:
		return p, fmt.Errorf("parameters.strategy: must be %q or %q, got %q", StrategyEncodedEndpointHeader, StrategySessionID, p.Strategy)
	}
	p.EncodedEndpointHeaderConfig.Header = strings.ToLower(strings.TrimSpace(p.EncodedEndpointHeaderConfig.Header))
	if p.EncodedEndpointHeaderConfig.Header == "" {
		p.EncodedEndpointHeaderConfig.Header = DefaultHeader
	}
	return p, nil
}

// Register adds both plugin types to reg.
func Register(reg *framework.Registry) error {
	for _, typ := range []string{FilterType, ScorerType} {
		if err := reg.Register(typ, func(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
			p, err := parse(raw)
			if err != nil {
				return nil, err
			}
			if typ == FilterType {
				return NewFilter(name, p), nil
			}
			return NewScorer(name, p), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// EndpointID is an endpoint's id in a token: "<namespace>/<name>" (upstream
// EndpointMetadata.ID.String(), a types.NamespacedName).
func EndpointID(md *framework.EndpointMetadata) string { return md.Namespace + "/" + md.Name }

// Token is the session token naming md: base64 (standard encoding) of EndpointID.
func Token(md *framework.EndpointMetadata) string {
	return base64.StdEncoding.EncodeToString([]byte(EndpointID(md)))
}

// Affinity is what session-affinity-filter and session-affinity-scorer share: the token, the
// admission check, the PreRequest and response hooks. Filter and Scorer embed it.
type Affinity struct {
	typed  framework.TypedName
	params Parameters
	// targets holds, with ProfileName set, the request's endpoint in that profile from
	// PreRequest until ResponseComplete (keyed by LLMRequest.RequestID).
	targets sync.Map
}

// Filter is session-affinity-filter: it keeps only the session's endpoint when it is a candidate.
type Filter struct{ *Affinity }

// Scorer is session-affinity-scorer: 1 for the session's endpoint, 0 for every other candidate.
type Scorer struct{ *Affinity }

// NewFilter returns a session-affinity-filter named name ("" = the type).
func NewFilter(name string, p Parameters) *Filter { return &Filter{newAffinity(FilterType, name, p)} }

// NewScorer returns a session-affinity-scorer named name ("" = the type).
func NewScorer(name string, p Parameters) *Scorer { return &Scorer{newAffinity(ScorerType, name, p)} }

func newAffinity(typ, name string, p Parameters) *Affinity {
	if name == "" {
		name = typ
	}
	if p.EncodedEndpointHeaderConfig.Header == "" {
		p.EncodedEndpointHeaderConfig.Header = DefaultHeader
	}
	return &Affinity{typed: framework.TypedName{Type: typ, Name: name}, params: p}
}

// Header is the header the plugin reads and writes the token in.
func (a *Affinity) Header() string { return a.params.EncodedEndpointHeaderConfig.Header }

// TypedName returns the plugin's type and name.
func (a *Affinity) TypedName() framework.TypedName { return a.typed }

// sessionID decodes the request's token: the endpoint id, "" when the request has none. A
// token that is present but empty or not standard base64 is an error wrapping
// framework.ErrBadRequest that names the header [eppkit].
func (a *Affinity) sessionID(req *framework.LLMRequest) (string, error) {
	if req == nil {
		return "", nil
	}
	raw, ok := req.Headers[a.Header()]
	if !ok {
		return "", nil
	}
	tok := strings.TrimSpace(raw)
	if tok == "" {
		return "", fmt.Errorf("header %s: the session token is empty (send it as the EPP returned it, or leave it out): %w", a.Header(), framework.ErrBadRequest)
	}
	id, err := base64.StdEncoding.DecodeString(tok)
	if err != nil {
		return "", fmt.Errorf("header %s: %q is not a session token (standard base64 of an endpoint id): %w", a.Header(), raw, framework.ErrBadRequest)
	}
	return string(id), nil
}

// AdmitRequest refuses a request whose token is malformed (400 naming the header).
func (a *Affinity) AdmitRequest(_ context.Context, req *framework.LLMRequest, _ []*framework.Endpoint) error {
	_, err := a.sessionID(req)
	return err
}

// session returns the candidate the request's token names, nil when none does.
func (a *Affinity) session(req *framework.LLMRequest, endpoints []*framework.Endpoint) *framework.Endpoint {
	id, err := a.sessionID(req)
	if err != nil || id == "" {
		return nil
	}
	for _, e := range endpoints {
		if e.Metadata != nil && EndpointID(e.Metadata) == id {
			return e
		}
	}
	return nil
}

// Filter keeps only the session's endpoint when it is a candidate, else every candidate (a
// session filter never leaves none).
func (a *Filter) Filter(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	if e := a.session(req, endpoints); e != nil {
		return []*framework.Endpoint{e}
	}
	return endpoints
}

// Score is 1 for the session's endpoint and 0 for every other candidate.
func (a *Scorer) Score(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) map[string]float64 {
	out := make(map[string]float64, len(endpoints))
	e := a.session(req, endpoints)
	for _, c := range endpoints {
		out[c.Key()] = 0
	}
	if e != nil {
		out[e.Key()] = 1
	}
	return out
}

// PreRequest records the request's endpoint in ProfileName's result (only with ProfileName).
func (a *Affinity) PreRequest(_ context.Context, req *framework.LLMRequest, res *framework.SchedulingResult) {
	if a.params.ProfileName == "" || req == nil || res == nil {
		return
	}
	if pr := res.ProfileResults[a.params.ProfileName]; pr != nil && len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0].Metadata != nil {
		a.targets.Store(req.RequestID, pr.TargetEndpoints[0].Metadata)
	}
}

// ResponseHeader sets the token on the response: the endpoint that served the request, or with
// ProfileName that profile's first target (none when it did not run).
func (a *Affinity) ResponseHeader(_ context.Context, req *framework.LLMRequest, resp *framework.Response) {
	if resp == nil {
		return
	}
	md := resp.Endpoint
	if a.params.ProfileName != "" {
		md = nil
		if req != nil {
			if v, ok := a.targets.Load(req.RequestID); ok {
				md = v.(*framework.EndpointMetadata)
			}
		}
	}
	if md == nil {
		return
	}
	resp.SetHeader(a.Header(), Token(md))
}

// ResponseComplete forgets the request (ProfileName only).
func (a *Affinity) ResponseComplete(_ context.Context, req *framework.LLMRequest, _ *framework.Response) {
	if req != nil {
		a.targets.Delete(req.RequestID)
	}
}

var (
	_ framework.Admitter               = (*Filter)(nil)
	_ framework.Filter                 = (*Filter)(nil)
	_ framework.PreRequest             = (*Filter)(nil)
	_ framework.ResponseHeaderPlugin   = (*Filter)(nil)
	_ framework.ResponseCompletePlugin = (*Filter)(nil)
	_ framework.Admitter               = (*Scorer)(nil)
	_ framework.Scorer                 = (*Scorer)(nil)
	_ framework.ResponseHeaderPlugin   = (*Scorer)(nil)
)
