package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
)

// SetLatency sets latency keys of the fake vLLM at addr (ip:port) through its admin API
// (POST /admin/config with the simulator's keys, e.g. "time-to-first-token": "10ms",
// "inter-token-latency": "2ms") and restores their previous values in t.Cleanup. It fails the
// test when the fake refuses a key or value. Latency changes apply to requests scheduled
// afterwards.
func (s *Suite) SetLatency(t TestingT, addr string, keys map[string]any) {
	t.Helper()
	s.member(t, addr)
	prev, err := s.getAdmin(addr)
	if err != nil {
		t.Fatalf("read the admin config of %s: %v", addr, err)
	}
	restore := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		v, ok := prev[k]
		if !ok {
			t.Fatalf("set latency on %s: the fake has no admin key %q", addr, k)
		}
		restore[k] = v
	}
	if err := s.postAdmin(addr, keys); err != nil {
		t.Fatalf("set latency on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		if err := s.postAdmin(addr, restore); err != nil {
			t.Errorf("restore latency on %s: %v", addr, err)
		}
	})
}

// getAdmin returns GET /admin/config of the fake at addr as raw JSON values by key.
func (s *Suite) getAdmin(addr string) (map[string]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeouts.Request.D())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/config", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/config: HTTP %d: %s", resp.StatusCode, b)
	}
	out := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("GET /admin/config: %w", err)
	}
	return out, nil
}
