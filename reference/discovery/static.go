package discovery

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/eppkit/eppkit/reference/framework"
)

// Static is a fixed endpoint list (`--endpoints`) with priorities from `--objectives` [eppkit].
// It is synced from the start and never changes.
type Static struct {
	set        endpointSet
	objectives map[string]int
}

var _ Source = (*Static)(nil)

// NewStatic validates addrs, each "ip:port" (IPv6 in brackets: "[fd00::1]:8000"; surrounding
// spaces are ignored), and returns the source. Each endpoint's Name and PodName are its
// "ip:port", Namespace is empty. objectives maps InferenceObjective names to priorities (see
// ParseObjectives); nil means none. An empty addrs is allowed (every request then gets 503).
// Errors name the bad entry and its position: not ip:port, a host name instead of an IP, an IPv6
// zone, port outside 1–65535, a duplicate; or an empty objective name.
func NewStatic(addrs []string, objectives map[string]int) (*Static, error) {
	eps := make(map[string]*framework.EndpointMetadata, len(addrs))
	for i, raw := range addrs {
		ip, port, err := parseEndpoint(raw)
		if err != nil {
			return nil, fmt.Errorf("endpoints[%d] %q: %w", i, raw, err)
		}
		m := &framework.EndpointMetadata{Address: ip, Port: port}
		key := m.Key()
		m.Name, m.PodName = key, key
		if _, dup := eps[key]; dup {
			return nil, fmt.Errorf("endpoints[%d] %q: duplicate of an earlier entry %s", i, raw, key)
		}
		eps[key] = m
	}
	for name := range objectives {
		if strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("objectives: empty objective name")
		}
	}
	s := &Static{objectives: maps.Clone(objectives)}
	s.set.eps = eps
	return s, nil
}

// parseEndpoint parses "ip:port" into a canonical IP string and a port in 1–65535.
func parseEndpoint(raw string) (string, int, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", 0, fmt.Errorf("empty entry, want ip:port")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("want ip:port with IPv6 in brackets ([fd00::1]:8000): %v", err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q is not in 1-65535", port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", 0, fmt.Errorf("host %q is not an IP address (host names are not resolved)", host)
	}
	if ip.Zone() != "" {
		return "", 0, fmt.Errorf("IPv6 zone %q is not allowed in an endpoint address", ip.Zone())
	}
	return ip.Unmap().String(), n, nil
}

// ParseObjectives parses `--objectives`: "name=priority,..." with integer priorities (negative
// means sheddable, SPEC §3). Spaces around names and numbers are ignored; "" gives an empty map.
// Errors name the entry: no '=', empty name, a priority that is not an integer, a repeated name.
func ParseObjectives(s string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, entry := range strings.Split(s, ",") {
		name, prio, ok := strings.Cut(entry, "=")
		name, prio = strings.TrimSpace(name), strings.TrimSpace(prio)
		if !ok {
			return nil, fmt.Errorf("objectives[%d] %q: want name=priority", i, strings.TrimSpace(entry))
		}
		if name == "" {
			return nil, fmt.Errorf("objectives[%d] %q: empty objective name", i, strings.TrimSpace(entry))
		}
		p, err := strconv.Atoi(prio)
		if err != nil {
			return nil, fmt.Errorf("objectives[%d] %q: priority %q is not an integer", i, strings.TrimSpace(entry), prio)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("objectives[%d] %q: objective %q given twice", i, strings.TrimSpace(entry), name)
		}
		out[name] = p
	}
	return out, nil
}

// Start does nothing: the list is fixed.
func (s *Static) Start(context.Context) error { return nil }

// Synced is always true.
func (s *Static) Synced() bool { return true }

// Endpoints returns copies of the endpoints sorted by Key().
func (s *Static) Endpoints() []*framework.EndpointMetadata { return s.set.list() }

// Snapshot returns the current endpoints sorted by Key(), shared and read-only (Source.Snapshot).
func (s *Static) Snapshot() []*framework.EndpointMetadata { return s.set.snapshot() }

// Subscribe calls fn once with every endpoint as added; the set never changes afterwards.
func (s *Static) Subscribe(fn func(added, removed []*framework.EndpointMetadata)) {
	s.set.subscribe(fn)
}

// Priority returns the --objectives priority of the objective.
func (s *Static) Priority(objective string) (int, bool) {
	p, ok := s.objectives[objective]
	return p, ok
}
