package vllm

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func postWithHeader(t *testing.T, url, body, header, value string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return resp, b
}

func TestParseReturnError(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ReturnError
		bad  string // a substring of the refusal
	}{
		{in: "503", want: ReturnError{Status: 503, AfterTokens: -1}},
		{in: " 429 ", want: ReturnError{Status: 429, AfterTokens: -1}},
		{in: "500@0", want: ReturnError{Status: 500, AfterTokens: 0}},
		{in: "502@7", want: ReturnError{Status: 502, AfterTokens: 7}},
		{in: "rate_limit", want: ReturnError{Kind: FailureRateLimit, AfterTokens: -1}},
		{in: "reset", want: ReturnError{Kind: FailureReset, AfterTokens: -1}},
		{in: "abc", bad: "must be an integer"},
		{in: "", bad: "must be an integer"},
		{in: "200", bad: "[400, 599]"},
		{in: "399", bad: "[400, 599]"},
		{in: "600", bad: "[400, 599]"},
		{in: "500@", bad: "token count"},
		{in: "500@-1", bad: "token count"},
		{in: "500@x", bad: "token count"},
	} {
		got, err := ParseReturnError(tc.in)
		if tc.bad != "" {
			if err == nil {
				t.Errorf("%q: accepted as %+v, want a refusal", tc.in, got)
				continue
			}
			if err.Code != http.StatusBadRequest || err.Param == nil || *err.Param != HeaderReturnError || !strings.Contains(err.Message, tc.bad) {
				t.Errorf("%q: refusal %+v (param %v), want 400 naming %s and saying %q", tc.in, err, err.Param, HeaderReturnError, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestReturnErrorStatus: X-Return-Error N answers N with the simulator's body before the
// request runs, streamed or not, on every API; the server keeps serving (the next request without
// the header succeeds).
func TestReturnErrorStatus(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	for path, body := range map[string]string{
		"/v1/completions":      `{"model":"m","prompt":"hello there","max_tokens":3}`,
		"/v1/chat/completions": `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"/v1/embeddings":       `{"model":"m","input":"hi"}`,
		"/v1/responses":        `{"model":"m","stream":true,"input":"hi"}`,
	} {
		for _, code := range []int{503, 429, 400} {
			resp, b := postWithHeader(t, inst.URL()+path, body, HeaderReturnError, strconvItoa(code))
			if resp.StatusCode != code {
				t.Fatalf("%s %d: status %d: %s", path, code, resp.StatusCode, b)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("%s %d: content-type %q, want a JSON error before any SSE", path, code, ct)
			}
			e := decodeError(t, b)
			if e.Code != code || e.Type != errorType(code) || e.Param != nil ||
				e.Message != "Simulated error triggered by X-Return-Error header (code "+strconvItoa(code)+")" {
				t.Errorf("%s %d: error %+v, want the simulator's", path, code, e)
			}
			if resp.Header.Get(HeaderPod) != "pod-a" {
				t.Errorf("%s: the error lacks %s", path, HeaderPod)
			}
		}
		// The model is not checked first: the simulator answers the header before the model.
		resp, b := postWithHeader(t, inst.URL()+path, strings.Replace(body, `"m"`, `"nope"`, 1), HeaderReturnError, "502")
		if resp.StatusCode != 502 {
			t.Errorf("%s unknown model: status %d, want 502 (header first): %s", path, resp.StatusCode, b)
		}
		if resp, b := post(t, inst.URL()+path, body); resp.StatusCode != http.StatusOK {
			t.Errorf("%s without the header: status %d: %s", path, resp.StatusCode, b)
		}
	}
	// A malformed body is still its own 400, before the header.
	resp, b := postWithHeader(t, inst.URL()+"/v1/completions", `{"model":`, HeaderReturnError, "503")
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body: status %d, want 400: %s", resp.StatusCode, b)
	}
}

// TestReturnErrorBadValue: an unknown value is a 400 naming the header, in the API's own
// shape, and the server keeps serving.
func TestReturnErrorBadValue(t *testing.T) {
	inst := startTest(t, nil)
	for _, v := range []string{"boom", "200", "503@x"} {
		resp, b := postWithHeader(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`, HeaderReturnError, v)
		checkErrorShape(t, "/v1/completions", b, http.StatusBadRequest, HeaderReturnError)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), v) {
			t.Errorf("%q: status %d body %s, want 400 quoting the value", v, resp.StatusCode, b)
		}
		resp, b = postWithHeader(t, inst.URL()+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, HeaderReturnError, v)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"type":"error"`) || !strings.Contains(string(b), HeaderReturnError) {
			t.Errorf("messages %q: status %d body %s, want Anthropic's 400 naming the header", v, resp.StatusCode, b)
		}
	}
	if resp, b := post(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`); resp.StatusCode != http.StatusOK {
		t.Errorf("after bad values: status %d: %s", resp.StatusCode, b)
	}
}

// TestReturnErrorMidStream: "N@K" streams K tokens and then ends the stream with the API's
// in-stream error carrying N; without stream it is N before any byte.
func TestReturnErrorMidStream(t *testing.T) {
	inst := startTest(t, func(c *Config) { c.Mode = ModeEcho })
	const prompt = "one two three four five six"
	stream := func(path, body, value string) []sseEvent {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, inst.URL()+path, strings.NewReader(body))
		req.Header.Set(HeaderReturnError, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s: status %d: %s", path, value, resp.StatusCode, b)
		}
		return readSSE(t, resp.Body)
	}
	chat := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + prompt + `"}]}`
	for _, k := range []int{0, 1, 3, 6, 50} {
		evs := stream("/v1/chat/completions", chat, "500@"+strconvItoa(k))
		n := len(evs)
		if n < 2 || evs[n-1].data != "[DONE]" {
			t.Fatalf("@%d: events %v, want the error then [DONE]", k, evs)
		}
		var e struct {
			Error *APIError `json:"error"`
		}
		if err := json.Unmarshal([]byte(evs[n-2].data), &e); err != nil || e.Error == nil || e.Error.Code != 500 {
			t.Fatalf("@%d: next to last event %q, want vLLM's in-stream error with code 500", k, evs[n-2].data)
		}
		tokens := 0
		for j, ev := range evs[:n-2] {
			m := mustJSON(t, ev.data)
			// With vLLM's placement the last token chunk carries the finish reason, so only a
			// failure at or past the last token follows one.
			if at(m, "choices", 0, "finish_reason") != nil && (k < 6 || j != n-3) {
				t.Errorf("@%d: a finishing chunk before the error: %s", k, ev.data)
			}
			if c, ok := at(m, "choices", 0, "delta", "content").(string); ok && c != "" {
				tokens++
			}
		}
		if want := min(k, 6); tokens != want {
			t.Errorf("@%d: %d content chunks before the error, want %d", k, tokens, want)
		}
	}
	evs := stream("/v1/messages", `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`, "529@2")
	if last := evs[len(evs)-1]; last.name != "error" || !strings.Contains(last.data, `"type":"error"`) || strings.Contains(names(evs)[0], "message_stop") {
		t.Errorf("messages: events %v, want Anthropic's error event last", names(evs))
	}
	evs = stream("/v1/responses", `{"model":"m","stream":true,"input":"`+prompt+`"}`, "500@2")
	if last := evs[len(evs)-1]; last.name != "error" || !strings.Contains(last.data, `"code":"500"`) {
		t.Errorf("responses: last event %+v, want an error event with code 500", last)
	}
	for _, n := range names(evs) {
		if n == "response.completed" {
			t.Errorf("responses: a failed stream completed: %v", names(evs))
		}
	}
	// Not streamed: the status before any byte.
	resp, b := postWithHeader(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":3}`, HeaderReturnError, "500@2")
	if resp.StatusCode != 500 || decodeError(t, b).Code != 500 {
		t.Errorf("unstreamed 500@2: status %d: %s", resp.StatusCode, b)
	}
}

// TestReturnErrorKinds: a failure kind name injects that failure exactly, with failure injection
// off: rate_limit is the simulator's 429, reset a connection reset.
func TestReturnErrorKinds(t *testing.T) {
	inst := startTest(t, nil)
	resp, b := postWithHeader(t, inst.URL()+"/v1/completions", `{"model":"m","prompt":"x","max_tokens":1}`, HeaderReturnError, FailureRateLimit)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), "Rate limit reached") {
		t.Errorf("rate_limit: status %d: %s", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodPost, inst.URL()+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","max_tokens":1}`))
	req.Header.Set(HeaderReturnError, FailureReset)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("reset: got status %d, want a connection error", resp.StatusCode)
	}
}

func strconvItoa(n int) string { b, _ := json.Marshal(n); return string(b) }
