package predictor

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const validRow = `{"kv_cache_percentage": 0.1, "input_token_length": 10, "num_request_waiting": 0, "num_request_running": 1, "num_tokens_generated": 0, "prefix_cache_score": 0.5}`

func TestServerEndpoints(t *testing.T) {
	m, err := NewModel(Config{PriorTTFTms: 50, PriorTPOTms: 5})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(m, ServerOptions{TrainingServerURL: "http://self"}))
	defer srv.Close()
	tests := []struct {
		name, method, path, body string
		code                     int
		contains                 []string
	}{
		{"healthz", "GET", "/healthz", "", 200, []string{`"status":"ok"`}},
		{"readyz before training", "GET", "/readyz", "", 503, []string{"Models are not ready"}},
		{"status before training", "GET", "/status", "", 200, []string{`"is_ready":false`, `"model_type":"bayesian_ridge"`, `"training_server_url":"http://self"`, `"models_exist"`}},
		{"model info", "GET", "/model/download/info", "", 200, []string{`"model_type":"bayesian_ridge"`, `"coefficients":"/metrics"`, `"ttft_coefficients_ready":false`}},
		{"single predict serves the prior", "POST", "/predict", validRow, 200, []string{`"ttft_ms":50`, `"tpot_ms":5`, `"last_model_load":null`}},
		{"bulk with one bad row", "POST", "/predict/bulk", `{"requests": [` + validRow + `, {"kv_cache_percentage": 3}]}`, 200,
			[]string{`"successful_predictions":1`, `"failed_predictions":1`, `"index":1`, `requests[1].input_token_length: field required`, `"predictions":[{`, `,null]`}},
		{"strict with one bad row fails whole", "POST", "/predict/bulk/strict", `{"requests": [` + validRow + `, {"kv_cache_percentage": 3}]}`, 422, []string{"requests[1]"}},
		{"strict wrong type", "POST", "/predict/bulk/strict", `{"requests": [{"kv_cache_percentage": 0.1, "input_token_length": "ten", "num_request_waiting": 0, "num_request_running": 1, "num_tokens_generated": 0, "prefix_cache_score": 0.5}]}`, 422, []string{"requests[0].input_token_length: cannot use JSON string"}},
		{"strict requests not a list", "POST", "/predict/bulk/strict", `{"requests": 5}`, 422, []string{"body.requests: must be a list"}},
		{"strict requests missing", "POST", "/predict/bulk/strict", `{}`, 422, []string{"body.requests: field required"}},
		{"training entries missing", "POST", "/add_training_data_bulk", `{}`, 422, []string{"body.entries: field required"}},
		{"training empty list accepted", "POST", "/add_training_data_bulk", `{"entries": []}`, 202, []string{"Accepted 0 training samples."}},
		{"training missing target", "POST", "/add_training_data_bulk", `{"entries": [` + validRow + `]}`, 422, []string{"entries[0].actual_ttft_ms: field required"}},
		{"wrong method", "GET", "/predict", "", 405, nil},
		{"unknown path", "GET", "/nope", "", 404, nil},
		{"metrics", "GET", "/metrics", "", 200, []string{`model_type{type="bayesian_ridge"} 1`, `ttft_intercept 50`, `ttft_coef{feature="effective_input_tokens"} 0`, `training_samples_count{cache_bucket="0",model="ttft",prefix_bucket="0",queue_bucket="0"} 0`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("%s %s: status %d, want %d; body %s", tc.method, tc.path, resp.StatusCode, tc.code, b)
			}
			for _, c := range tc.contains {
				if !strings.Contains(string(b), c) {
					t.Errorf("%s %s: body lacks %q:\n%s", tc.method, tc.path, c, b)
				}
			}
		})
	}
}

func TestServerBodyLimit(t *testing.T) {
	m, _ := NewModel(Config{})
	const limit = 4096
	srv := httptest.NewServer(NewHandler(m, ServerOptions{MaxBodyBytes: limit}))
	defer srv.Close()
	big := `{"requests": [` + strings.Repeat(validRow+",", limit/len(validRow)+1) + validRow + `]}`
	resp, err := http.Post(srv.URL+"/predict/bulk/strict", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	var eb errorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(eb.Detail, "larger than") {
		t.Fatalf("oversized body: %d %q, want 413", resp.StatusCode, eb.Detail)
	}
}
