package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
)

// adminIgnoredKeys are keys llm-d-inference-sim's /admin/config accepts (its `admin:"configurable"`
// fields) that this fake does not model; they are accepted, echoed under "ignored", and have no
// effect.
var adminIgnoredKeys = []string{"kv-cache-transfer-latency", "kv-cache-transfer-latency-std-dev",
	"kv-cache-transfer-time-per-token", "kv-cache-transfer-time-std-dev",
	"time-to-generate-image", "time-to-generate-image-std-dev", "latency-calculator",
	"image-emission-rate"}

// AdminConfig is the body of GET /admin/config and the schema of POST /admin/config (every key
// optional in a POST; "fake-metrics": null unpins the metrics). Keys are the simulator's.
type AdminConfig struct {
	Latency
	FakeMetrics          *FakeMetrics `json:"fake-metrics"`
	FailureInjectionRate int          `json:"failure-injection-rate"`
	FailureTypes         []string     `json:"failure-types"`
	// HealthStatus (eppkit only, not a simulator key) is the HTTP status GET /health answers:
	// 200 (0 in a POST means 200) or 500–599 to fail readiness probes.
	HealthStatus int                        `json:"health-status,omitempty"`
	Ignored      map[string]json.RawMessage `json:"ignored,omitempty"`
}

// MetricsScrapes is the body of GET /admin/metrics-scrapes (eppkit only; the simulator has no
// such path): how many GET /metrics pages this server has written since it started. A harness
// that changed the fake's metrics reads it, then waits for it to grow, to know that a scraper
// (the EPP) has fetched a page with the new values.
type MetricsScrapes struct {
	Scrapes uint64 `json:"scrapes"`
}

func (d *dynamic) admin() AdminConfig {
	return AdminConfig{Latency: d.latency, FakeMetrics: d.fakeMetrics, FailureInjectionRate: d.failureRate,
		FailureTypes: slices.Clone(d.failureTypes), HealthStatus: d.healthStatus, Ignored: maps.Clone(d.ignored)}
}

// AdminConfig returns the run-time configuration.
func (s *Server) AdminConfig() AdminConfig { return s.dyn.Load().admin() }

// UpdateAdminConfig applies a POST /admin/config body: a JSON object of simulator keys. Unknown
// keys, wrong types and out-of-range values are an *APIError (400) naming the key, and nothing
// is applied. Latency changes apply to tokens scheduled afterwards.
func (s *Server) UpdateAdminConfig(body []byte) (AdminConfig, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil || dec.More() {
		if err == nil {
			err = fmt.Errorf("trailing data after the object")
		}
		return AdminConfig{}, NewAPIError(http.StatusBadRequest, "", "invalid JSON body: want an object of configuration keys: %v", err)
	}
	// One update at a time from load to store (setLatency included): concurrent POSTs of
	// different keys must not drop one another.
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	cur := s.dyn.Load()
	next := *cur
	next.ignored = maps.Clone(cur.ignored)
	latencyChanged := false
	keys := slices.Sorted(maps.Keys(raw))
	for _, k := range keys {
		v := raw[k]
		var err error
		var dst any
		switch k {
		case "time-to-first-token":
			dst = &next.latency.TimeToFirstToken
		case "time-to-first-token-std-dev":
			dst = &next.latency.TimeToFirstTokenStdDev
		case "inter-token-latency":
			dst = &next.latency.InterTokenLatency
		case "inter-token-latency-std-dev":
			dst = &next.latency.InterTokenLatencyStdDev
		case "prefill-overhead":
			dst = &next.latency.PrefillOverhead
		case "prefill-time-per-token":
			dst = &next.latency.PrefillTimePerToken
		case "prefill-time-std-dev":
			dst = &next.latency.PrefillTimeStdDev
		case "time-factor-under-load":
			dst = &next.latency.TimeFactorUnderLoad
		case "failure-injection-rate":
			dst = &next.failureRate
		case "failure-types":
			var types []string
			err = json.Unmarshal(v, &types)
			next.failureTypes = types
		case "health-status":
			var code int
			if err = json.Unmarshal(v, &code); err == nil && code != 0 && code != http.StatusOK && (code < 500 || code > 599) {
				err = fmt.Errorf("want 200 or 500–599, got %d", code)
			}
			next.healthStatus = code
		case "fake-metrics":
			if string(bytes.TrimSpace(v)) == "null" {
				next.fakeMetrics = nil
				break
			}
			var fm FakeMetrics
			if err = json.Unmarshal(v, &fm); err == nil {
				err = fm.Validate()
			}
			next.fakeMetrics = &fm
		default:
			if !slices.Contains(adminIgnoredKeys, k) {
				return AdminConfig{}, NewAPIError(http.StatusBadRequest, k, "unknown configuration key %q", k)
			}
			if next.ignored == nil {
				next.ignored = map[string]json.RawMessage{}
			}
			next.ignored[k] = v
		}
		if dst != nil {
			err = json.Unmarshal(v, dst)
			if _, isLatency := dst.(*Duration); isLatency || k == "time-factor-under-load" {
				latencyChanged = true
			}
		}
		if err != nil {
			return AdminConfig{}, NewAPIError(http.StatusBadRequest, k, "%s: %v", k, err)
		}
	}
	if err := next.latency.Validate(); err != nil {
		return AdminConfig{}, NewAPIError(http.StatusBadRequest, "", "%v", err)
	}
	if err := validateFailures(next.failureRate, next.failureTypes); err != nil {
		return AdminConfig{}, NewAPIError(http.StatusBadRequest, "", "%v", err)
	}
	if latencyChanged {
		if err := s.setLatency(next.latency); err != nil {
			return AdminConfig{}, NewAPIError(http.StatusInternalServerError, "", "applying the latency profile: %v", err)
		}
	}
	s.dyn.Store(&next)
	return next.admin(), nil
}

func (s *Server) handleAdminGet(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.AdminConfig())
}

func (s *Server) handleAdminPost(w http.ResponseWriter, r *http.Request) {
	body, apiErr := s.readBody(w, r)
	if apiErr != nil {
		writeAPIError(w, apiErr)
		return
	}
	cfg, err := s.UpdateAdminConfig(body)
	if err != nil {
		writeAPIError(w, err.(*APIError))
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}
