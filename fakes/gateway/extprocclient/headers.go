//lint:file-ignore SA1019 Envoy still honours the deprecated HeaderValueOption.append an EPP may send (EPPs in the field set it), so the stand-in must read it to apply mutations as Envoy does.

package extprocclient

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// HeaderSemantics selects how a HeaderMutation's set_headers are applied.
type HeaderSemantics int

const (
	// SemanticsEnvoyExtProc is Envoy's ext_proc filter as released
	// (source/extensions/filters/http/ext_proc/mutation_utils.cc applyHeaderMutations): only the
	// deprecated `append` is read, with default false (overwrite); append_action is ignored
	// (envoyproxy/envoy #36982; PRs #29862, #37139 and #39066 to honour it were not merged).
	// The default: what the Envoy releases gateways run today do.
	SemanticsEnvoyExtProc HeaderSemantics = iota
	// SemanticsAppendAction applies each HeaderValueOption as Envoy's API defines it
	// (api/envoy/config/core/v3/base.proto HeaderValueOption) and as Envoy's header parser
	// resolves it (source/common/router/header_parser.cc HeadersToAddEntry): append_action
	// (APPEND_IF_EXISTS_OR_ADD, its zero value, adds a second entry when the header exists;
	// ADD_IF_ABSENT; OVERWRITE_IF_EXISTS_OR_ADD; OVERWRITE_IF_EXISTS), unless the deprecated
	// BoolValue `append` is set, which then decides (true: APPEND_IF_EXISTS_OR_ADD, false:
	// OVERWRITE_IF_EXISTS_OR_ADD) and may not be combined with a non-default append_action.
	// Gateways that honour append_action (agentgateway since #775) behave this way, and so will
	// Envoy's ext_proc filter once envoyproxy/envoy #36982 is fixed: an EPP that leaves
	// append_action at its zero value duplicates every header the request already carries.
	SemanticsAppendAction
)

// String returns "envoy-ext-proc" or "append-action".
func (s HeaderSemantics) String() string {
	switch s {
	case SemanticsEnvoyExtProc:
		return "envoy-ext-proc"
	case SemanticsAppendAction:
		return "append-action"
	}
	return fmt.Sprintf("HeaderSemantics(%d)", int(s))
}

// ParseHeaderSemantics parses "envoy-ext-proc" or "append-action".
func ParseHeaderSemantics(s string) (HeaderSemantics, error) {
	for _, v := range []HeaderSemantics{SemanticsEnvoyExtProc, SemanticsAppendAction} {
		if s == v.String() {
			return v, nil
		}
	}
	return 0, fmt.Errorf("header semantics must be envoy-ext-proc or append-action, got %q", s)
}

// HeaderList is an HTTP header list as Envoy's header map holds it: lower-case names in order, a
// header with several values as several entries.
type HeaderList []Header

// Values returns the values of name (lower-case), in order.
func (h HeaderList) Values(name string) []string {
	var out []string
	for _, e := range h {
		if e.Key == name {
			out = append(out, e.Value)
		}
	}
	return out
}

// Has reports whether name is present.
func (h HeaderList) Has(name string) bool {
	for _, e := range h {
		if e.Key == name {
			return true
		}
	}
	return false
}

// set replaces every entry of name with one entry of value, where the first one was (Envoy's
// setCopy), or appends it.
func (h *HeaderList) set(name, value string) {
	out := (*h)[:0:0]
	done := false
	for _, e := range *h {
		if e.Key != name {
			out = append(out, e)
			continue
		}
		if !done {
			out = append(out, Header{Key: name, Value: value})
			done = true
		}
	}
	if !done {
		out = append(out, Header{Key: name, Value: value})
	}
	*h = out
}

func (h *HeaderList) add(name, value string) { *h = append(*h, Header{Key: name, Value: value}) }

func (h *HeaderList) remove(name string) {
	out := (*h)[:0:0]
	for _, e := range *h {
		if e.Key != name {
			out = append(out, e)
		}
	}
	*h = out
}

// MutationReport says what applying a HeaderMutation did.
type MutationReport struct {
	// Touched are the header names the mutation set, added or removed, in order (lower-case).
	Touched []string
	// Warnings describe mutations Envoy applies differently from what the EPP likely meant: a
	// header set with `value` only, which Envoy reads as empty (it reads raw_value:
	// envoy.reloadable_features.send_header_raw_value, on by default since Envoy 1.27;
	// envoyproxy/envoy #31555).
	Warnings []string
}

// EffectiveAction returns the append action Envoy applies for opt under sem. Errors: both the
// deprecated append and a non-default append_action set (SemanticsAppendAction; Envoy's header
// parser refuses it), or an append_action outside go-control-plane's enum.
func EffectiveAction(opt *corev3.HeaderValueOption, sem HeaderSemantics) (corev3.HeaderValueOption_HeaderAppendAction, error) {
	if sem == SemanticsEnvoyExtProc {
		if opt.GetAppend().GetValue() {
			return corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, nil
		}
		return corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, nil
	}
	action := opt.GetAppendAction()
	if _, known := corev3.HeaderValueOption_HeaderAppendAction_name[int32(action)]; !known {
		return 0, fmt.Errorf("header %q: unknown append_action %d", opt.GetHeader().GetKey(), int32(action))
	}
	if opt.GetAppend() != nil {
		if action != corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
			return 0, fmt.Errorf("header %q: both append and append_action are set, which Envoy does not allow", opt.GetHeader().GetKey())
		}
		if opt.GetAppend().GetValue() {
			return corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, nil
		}
		return corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, nil
	}
	return action, nil
}

// ApplyHeaderMutation applies hm to h as Envoy's ext_proc filter does (mutation_utils.cc
// applyHeaderMutations): remove_headers first, then set_headers in order, each with its
// EffectiveAction; the value is raw_value (a `value`-only option sets an empty value and is
// reported in Warnings). Errors, on which Envoy answers status_on_error and so does the gateway:
// both value and raw_value set, an invalid header name or value, and EffectiveAction's errors.
func ApplyHeaderMutation(h *HeaderList, hm *extprocv3.HeaderMutation, sem HeaderSemantics) (MutationReport, error) {
	var rep MutationReport
	for _, name := range hm.GetRemoveHeaders() {
		if !validHeaderName(name) {
			return rep, fmt.Errorf("remove_headers: invalid header name %q", name)
		}
		name = strings.ToLower(name)
		h.remove(name)
		rep.Touched = append(rep.Touched, name)
	}
	for _, opt := range hm.GetSetHeaders() {
		hv := opt.GetHeader()
		if hv == nil {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			return rep, fmt.Errorf("header %q: only one of value or raw_value may be set", hv.GetKey())
		}
		value := string(hv.GetRawValue())
		if value == "" && hv.GetValue() != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("header %q is set with value, not raw_value: Envoy reads raw_value and sets it empty", hv.GetKey()))
		}
		if !validHeaderName(hv.GetKey()) || !validHeaderValue(value) {
			return rep, fmt.Errorf("header %q: invalid character in the name or value", hv.GetKey())
		}
		action, err := EffectiveAction(opt, sem)
		if err != nil {
			return rep, err
		}
		name := strings.ToLower(hv.GetKey())
		exists := h.Has(name)
		switch action {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h.add(name, value)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if exists {
				continue
			}
			h.add(name, value)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h.set(name, value)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if !exists {
				continue
			}
			h.set(name, value)
		default:
			return rep, fmt.Errorf("header %q: append_action %v is not applied by this gateway", name, action)
		}
		rep.Touched = append(rep.Touched, name)
	}
	return rep, nil
}

// validHeaderName: an RFC 9110 token, optionally after one ':' (pseudo-headers), as Envoy's
// HeaderUtility::headerNameIsValid checks.
func validHeaderName(name string) bool {
	name = strings.TrimPrefix(name, ":")
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// validHeaderValue: no NUL, CR or LF (Envoy's HeaderUtility::headerValueIsValid).
func validHeaderValue(v string) bool { return !strings.ContainsAny(v, "\x00\r\n") }

// Duplicates returns the names among touched that h holds more than once, each once, in order:
// a request that would reach the model server with a duplicated header.
func (h HeaderList) Duplicates(touched []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, name := range touched {
		if seen[name] {
			continue
		}
		seen[name] = true
		if len(h.Values(name)) > 1 {
			out = append(out, name)
		}
	}
	return out
}
