// Package filters holds the reference EPP's filters (SPEC §3): header-based-testing-filter
// (upstream) and lora-affinity-filter (eppkit).
package filters

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/scorers"
)

// Plugin types.
const (
	// HeaderBasedTestingFilterType is the upstream type name.
	HeaderBasedTestingFilterType = "header-based-testing-filter"
	// LoRAAffinityFilterType is eppkit's LoRA filter (a name upstream never used).
	LoRAAffinityFilterType = "lora-affinity-filter"
	// TestEndpointSelectionHeader selects endpoints for header-based-testing-filter: a comma list
	// of "ip" or "ip:port" (IPv6 with or without brackets). Lower case, as framework headers are.
	TestEndpointSelectionHeader = "test-epp-endpoint-selection"
)

type noParams struct{}

// Register adds both filters to reg. It returns the first registration error.
func Register(reg *framework.Registry) error {
	if err := reg.Register(HeaderBasedTestingFilterType, func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		if err := framework.DecodeParameters(params, &noParams{}); err != nil {
			return nil, err
		}
		return NewHeaderBasedTestingFilter(name), nil
	}); err != nil {
		return err
	}
	return reg.Register(LoRAAffinityFilterType, func(name string, params json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		if err := framework.DecodeParameters(params, &noParams{}); err != nil {
			return nil, err
		}
		return NewLoRAAffinityFilter(name), nil
	})
}

func typed(typ, name string) framework.TypedName {
	if name == "" {
		name = typ
	}
	return framework.TypedName{Type: typ, Name: name}
}

// HeaderBasedTestingFilter keeps the endpoints named by the request header
// test-epp-endpoint-selection (GIE v1.5.0 pkg/epp/framework/plugins/scheduling/test/filter/
// request_header_based_filter.go and test/consts.go): each comma-separated entry is "ip"
// (selects every endpoint with that address) or "ip:port" (only the exact endpoint); IPv6 may be
// bracketed; blanks and unknown entries are ignored. A missing or blank header keeps no endpoint.
//
// Differences from v1.5.0, where its code disagrees with its own documentation: v1.5.0 maps an
// IP to one endpoint (the last with that IP) and de-duplicates by IP, so "ip:3000,ip:3001"
// keeps only one rank; we keep every named endpoint once. The result is in input order, as the
// framework's Filter contract requires (v1.5.0 returns header order).
type HeaderBasedTestingFilter struct{ typedName framework.TypedName }

var _ framework.Filter = (*HeaderBasedTestingFilter)(nil)

// NewHeaderBasedTestingFilter returns the filter (name "" means the type).
func NewHeaderBasedTestingFilter(name string) *HeaderBasedTestingFilter {
	return &HeaderBasedTestingFilter{typedName: typed(HeaderBasedTestingFilterType, name)}
}

// TypedName returns the plugin's type and name.
func (f *HeaderBasedTestingFilter) TypedName() framework.TypedName { return f.typedName }

// Filter keeps the endpoints the header names (see HeaderBasedTestingFilter).
func (f *HeaderBasedTestingFilter) Filter(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	out := []*framework.Endpoint{}
	if req == nil {
		return out
	}
	hv := strings.TrimSpace(req.Headers[TestEndpointSelectionHeader])
	if hv == "" {
		return out
	}
	ips := map[string]struct{}{}
	hostPorts := map[string]struct{}{}
	for _, item := range strings.Split(hv, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if host, port, err := net.SplitHostPort(item); err == nil {
			hostPorts[net.JoinHostPort(normalizeIP(host), port)] = struct{}{}
			continue
		}
		ips[normalizeIP(item)] = struct{}{}
	}
	for _, ep := range endpoints {
		if ep == nil || ep.Metadata == nil {
			continue
		}
		ip := normalizeIP(ep.Metadata.Address)
		_, byIP := ips[ip]
		_, byHostPort := hostPorts[net.JoinHostPort(ip, strconv.Itoa(ep.Metadata.Port))]
		if byIP || byHostPort {
			out = append(out, ep)
		}
	}
	return out
}

// normalizeIP strips brackets and returns the canonical text form of an IP (so "fd00::0:1"
// equals "fd00::1"); a string that is not an IP is returned trimmed.
func normalizeIP(s string) string {
	s = strings.Trim(strings.TrimSpace(s), "[]")
	if ip := net.ParseIP(s); ip != nil {
		return ip.String()
	}
	return s
}

// LoRAAffinityFilter [eppkit] narrows the candidates for the request's target model (an adapter
// name after rewrite) in three tiers, using the same metrics as lora-affinity-scorer:
//
//  1. the endpoints where the adapter is running (in ActiveModels), if any;
//  2. else the endpoints with a free adapter slot (len(ActiveModels) + len(WaitingModels) <
//     MaxActiveModels), if any;
//  3. else every candidate (the filter never empties the list).
//
// Endpoints where the adapter only waits are not preferred over those with a free slot: a free
// slot loads it as soon as a waiting one would. A request for a base model that no endpoint lists
// as an adapter falls to tier 2 on LoRA-enabled fleets and to tier 3 on fleets that report no
// max_lora; put the filter only in profiles that serve adapters.
type LoRAAffinityFilter struct{ typedName framework.TypedName }

var _ framework.Filter = (*LoRAAffinityFilter)(nil)

// NewLoRAAffinityFilter returns the filter (name "" means the type).
func NewLoRAAffinityFilter(name string) *LoRAAffinityFilter {
	return &LoRAAffinityFilter{typedName: typed(LoRAAffinityFilterType, name)}
}

// TypedName returns the plugin's type and name.
func (f *LoRAAffinityFilter) TypedName() framework.TypedName { return f.typedName }

// Filter applies the three tiers (see LoRAAffinityFilter), keeping input order.
func (f *LoRAAffinityFilter) Filter(_ context.Context, _ *framework.CycleState, req *framework.LLMRequest, endpoints []*framework.Endpoint) []*framework.Endpoint {
	model := ""
	if req != nil {
		model = req.TargetModel
	}
	var running, free []*framework.Endpoint
	for _, ep := range endpoints {
		if ep == nil || ep.Metrics == nil {
			continue
		}
		if _, ok := ep.Metrics.ActiveModels[model]; ok {
			running = append(running, ep)
		} else if scorers.HasFreeLoRASlot(ep.Metrics) {
			free = append(free, ep)
		}
	}
	switch {
	case len(running) > 0:
		return running
	case len(free) > 0:
		return free
	}
	return endpoints
}
