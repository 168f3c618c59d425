package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sseServer streams max_tokens chunks 20 ms apart, then usage and [DONE], and names itself in
// x-inference-pod; a prompt starting with "fail" gets a 429, one starting with "cut" loses its
// [DONE]. It records the most requests it saw in flight.
func sseServer(t *testing.T, inFlight, peak *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		var body completionBody
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Path != "/v1/completions" || !body.Stream {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if strings.HasPrefix(body.Prompt, "fail") {
			http.Error(w, `{"error":"queue full"}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("x-inference-pod", "pod-"+body.Model)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range body.MaxTokens {
			time.Sleep(20 * time.Millisecond)
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d \"}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n", body.MaxTokens)
		if !strings.HasPrefix(body.Prompt, "cut") {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}))
}

func TestRunLoadMeasuresStreams(t *testing.T) {
	var inFlight, peak atomic.Int64
	srv := sseServer(t, &inFlight, &peak)
	defer srv.Close()
	reqs := []Request{
		{ID: 0, Prompt: "hello ", OutputTokens: 4},
		{ID: 1, Prompt: "fail ", OutputTokens: 4},
		{ID: 2, Prompt: "cut ", OutputTokens: 2, Model: "lora"},
	}
	arr := []Arrival{{At: 0}, {At: 10 * time.Millisecond}, {At: 20 * time.Millisecond}}
	load, err := RunLoad(context.Background(), LoadConfig{BaseURL: srv.URL, Model: "base", Requests: reqs, Arrivals: arr})
	if err != nil {
		t.Fatal(err)
	}
	ok := load.Outcomes[0]
	if !ok.OK() || ok.Endpoint != "pod-base" || ok.OutputTokens != 4 || ok.PromptTokens != 7 || ok.CachedTokens != 3 || len(ok.ITLMs) != 3 {
		t.Fatalf("outcome 0: %+v", ok)
	}
	// The server sleeps 20 ms before each of its 4 chunks, so the first cannot arrive before 20 ms
	// and the last before 80 ms. Single gaps are not bounded: a starved client may read two chunks
	// at once.
	last := ok.TTFTMs
	for _, g := range ok.ITLMs {
		last += g
	}
	if ok.TTFTMs < 20 || last < 80 || ok.E2EMs < last-1 {
		t.Fatalf("outcome 0: TTFT %v ms, last chunk at %v ms, E2E %v ms; want ≥ 20, ≥ 80 and E2E after the last chunk", ok.TTFTMs, last, ok.E2EMs)
	}
	if f := load.Outcomes[1]; f.OK() || f.Status != 429 || !strings.Contains(f.Error, "429") {
		t.Fatalf("outcome 1: %+v, want a 429 failure", f)
	}
	if c := load.Outcomes[2]; c.OK() || !strings.Contains(c.Error, "[DONE]") || c.Endpoint != "pod-lora" {
		t.Fatalf("outcome 2: %+v, want a failure for the missing [DONE] from pod-lora", c)
	}
	if load.Duration <= 0 {
		t.Fatalf("duration %v", load.Duration)
	}
}

func TestRunLoadHonoursTheConcurrencyCap(t *testing.T) {
	var inFlight, peak atomic.Int64
	srv := sseServer(t, &inFlight, &peak)
	defer srv.Close()
	var reqs []Request
	var arr []Arrival
	for i := range 12 {
		reqs = append(reqs, Request{ID: i, Prompt: "p ", OutputTokens: 3})
		arr = append(arr, Arrival{At: 0})
	}
	load, err := RunLoad(context.Background(), LoadConfig{BaseURL: srv.URL, Model: "m", Requests: reqs, Arrivals: arr, MaxConcurrency: 3})
	if err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Fatalf("server saw %d requests in flight, want 1 to 3 (the cap)", p)
	}
	late := 0
	for _, o := range load.Outcomes {
		if !o.OK() {
			t.Fatalf("outcome %+v", o)
		}
		if o.SentMs > 40 {
			late++ // held back by the cap
		}
	}
	if late < 6 {
		t.Fatalf("%d of 12 requests sent after 40 ms; with a cap of 3 and ~60 ms streams at least 6 must wait", late)
	}
	if _, err := RunLoad(context.Background(), LoadConfig{Requests: reqs[:1], Arrivals: arr}); err == nil {
		t.Fatal("fewer requests than arrivals accepted")
	}
}
