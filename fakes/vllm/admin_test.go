package vllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestConcurrentAdminUpdatesOfDifferentKeysAreAllKept posts one key per goroutine at once, for
// many rounds; every round's values must all be in the configuration afterwards (no lost update).
func TestConcurrentAdminUpdatesOfDifferentKeysAreAllKept(t *testing.T) {
	srv := startTest(t, nil).Ranks[0]
	latencyKeys := []string{"time-to-first-token", "inter-token-latency", "prefill-overhead", "prefill-time-per-token"}
	ignoredKeys := adminIgnoredKeys[:4]
	keys := append(append([]string{}, latencyKeys...), ignoredKeys...)
	const rounds = 100
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				body := fmt.Sprintf(`{%q:"%dms"}`, k, 1000*round+i)
				if _, err := srv.UpdateAdminConfig([]byte(body)); err != nil {
					t.Errorf("round %d %s: %v", round, k, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		got := srv.AdminConfig()
		vals := []Duration{got.TimeToFirstToken, got.InterTokenLatency, got.PrefillOverhead, got.PrefillTimePerToken}
		for i, k := range latencyKeys {
			if want := Duration(time.Duration(1000*round+i) * time.Millisecond); vals[i] != want {
				t.Fatalf("round %d of %d (%d concurrent updates): %s = %v, want %v (an update was lost)",
					round, rounds, len(keys), k, vals[i], want)
			}
		}
		for j, k := range ignoredKeys {
			if want := fmt.Sprintf(`"%dms"`, 1000*round+len(latencyKeys)+j); string(got.Ignored[k]) != want {
				t.Fatalf("round %d of %d (%d concurrent updates): ignored %s = %s, want %s (an update was lost)",
					round, rounds, len(keys), k, got.Ignored[k], want)
			}
		}
	}
}

// TestAdminHealthStatus: "health-status" changes what GET /health answers (a failing readiness
// probe for suites/e2e); values other than 0, 200 and 5xx are refused naming the key.
func TestAdminHealthStatus(t *testing.T) {
	srv := startTest(t, nil).Ranks[0]
	health := func() int {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		return rec.Code
	}
	cases := []struct {
		body    string
		want    int
		wantErr bool
	}{
		{`{"health-status": 503}`, 503, false},
		{`{"health-status": 200}`, 200, false},
		{`{"health-status": 500}`, 500, false},
		{`{"health-status": 0}`, 200, false},
		{`{"health-status": 404}`, 200, true},
		{`{"health-status": "bad"}`, 200, true},
	}
	for _, c := range cases {
		_, err := srv.UpdateAdminConfig([]byte(c.body))
		if (err != nil) != c.wantErr {
			t.Fatalf("%s: err = %v, want error %v", c.body, err, c.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "health-status") {
			t.Errorf("%s: error %q does not name the key", c.body, err)
		}
		if got := health(); got != c.want {
			t.Errorf("after %s: GET /health = %d, want %d", c.body, got, c.want)
		}
	}
}

// TestAdminMetricsScrapes: GET /admin/metrics-scrapes counts the /metrics pages written, and
// nothing else (the admin reads themselves, API calls).
func TestAdminMetricsScrapes(t *testing.T) {
	h := startTest(t, nil).Ranks[0].Handler()
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	scrapes := func() uint64 {
		rec := get("/admin/metrics-scrapes")
		var m MetricsScrapes
		if err := json.Unmarshal(rec.Body.Bytes(), &m); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("GET /admin/metrics-scrapes: %d %s (%v)", rec.Code, rec.Body, err)
		}
		return m.Scrapes
	}
	if got := scrapes(); got != 0 {
		t.Fatalf("at start: %d scrapes", got)
	}
	for i := 0; i < 3; i++ {
		if rec := get("/metrics"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "vllm:num_requests_waiting") {
			t.Fatalf("GET /metrics: %d", rec.Code)
		}
	}
	get("/admin/config")
	get("/v1/models")
	if got := scrapes(); got != 3 {
		t.Fatalf("after 3 pages: %d scrapes", got)
	}
}
