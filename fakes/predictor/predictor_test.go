package predictor_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	fakepredictor "github.com/eppkit/eppkit/fakes/predictor"
	"github.com/eppkit/eppkit/reference/predictor"
)

func startFake(t *testing.T, b fakepredictor.Behavior) *fakepredictor.Server {
	t.Helper()
	f, err := fakepredictor.New(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func newClient(t *testing.T, cfg predictor.ClientConfig) *predictor.Client {
	t.Helper()
	c, err := predictor.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var oneRequest = []predictor.PredictionRequest{{KVCachePercentage: 0.3, InputTokenLength: 100}}

// TestClientAgainstScriptedFake checks the HTTP client's answer to each scripted behaviour.
func TestClientAgainstScriptedFake(t *testing.T) {
	tests := []struct {
		name         string
		b            fakepredictor.Behavior
		wantTTFT     float64
		wantErr      string
		wantNotReady bool // the error wraps predictor.ErrNotReady
		maxElapsed   time.Duration
	}{
		{name: "fixed answers", b: fakepredictor.Behavior{TTFTms: 123, TPOTms: 7}, wantTTFT: 123, maxElapsed: 2 * time.Second},
		{name: "down", b: fakepredictor.Behavior{Down: true}, wantErr: "predict/bulk/strict", wantNotReady: true, maxElapsed: 2 * time.Second},
		{name: "slow beyond the client timeout", b: fakepredictor.Behavior{Delay: 5 * time.Second}, wantErr: "deadline exceeded", wantNotReady: true, maxElapsed: 2 * time.Second},
		{name: "slow within the timeout", b: fakepredictor.Behavior{Delay: 50 * time.Millisecond, TTFTms: 5}, wantTTFT: 5, maxElapsed: 2 * time.Second},
		{name: "503", b: fakepredictor.Behavior{ErrorStatus: 503}, wantErr: "status 503", wantNotReady: true, maxElapsed: 2 * time.Second},
		{name: "400 is the caller's fault, not unreadiness", b: fakepredictor.Behavior{ErrorStatus: 400}, wantErr: "status 400", maxElapsed: 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.b)
			c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{f.URL()}, Timeout: 300 * time.Millisecond})
			start := time.Now()
			got, err := c.PredictBulk(context.Background(), oneRequest)
			if el := time.Since(start); el > tc.maxElapsed {
				t.Errorf("PredictBulk took %v, want ≤ %v", el, tc.maxElapsed)
			}
			if tc.wantErr == "" {
				if err != nil || len(got) != 1 || got[0].TTFT != tc.wantTTFT {
					t.Fatalf("PredictBulk = %+v, %v; want TTFT %v", got, err, tc.wantTTFT)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("PredictBulk error = %v, want one containing %q", err, tc.wantErr)
			}
			if errors.Is(err, predictor.ErrNotReady) != tc.wantNotReady {
				t.Fatalf("errors.Is(%v, ErrNotReady) = %v, want %v", err, !tc.wantNotReady, tc.wantNotReady)
			}
		})
	}
}

func TestClientReadinessFollowsStatus(t *testing.T) {
	ctx := context.Background()
	f := startFake(t, fakepredictor.Behavior{NotReady: true})
	c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{f.URL()}, Timeout: time.Second, StatusInterval: time.Hour})
	steps := []struct {
		name  string
		set   func(*fakepredictor.Behavior)
		ready bool
	}{
		{"not ready", func(b *fakepredictor.Behavior) {}, false},
		{"ready", func(b *fakepredictor.Behavior) { b.NotReady = false }, true},
		{"down", func(b *fakepredictor.Behavior) { b.Down = true }, false},
		{"back up", func(b *fakepredictor.Behavior) { b.Down = false }, true},
	}
	for _, s := range steps {
		if err := f.Update(s.set); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Status(ctx)
		if got := c.Ready(); got != s.ready {
			t.Fatalf("%s: Ready() = %v, want %v", s.name, got, s.ready)
		}
	}
	// A failed prediction turns Ready false at once, without waiting for /status.
	_ = f.Update(func(b *fakepredictor.Behavior) { b.Down = true })
	if _, err := c.PredictBulk(ctx, oneRequest); err == nil {
		t.Fatal("PredictBulk against a down fake: want an error")
	}
	if c.Ready() {
		t.Fatal("Ready() = true after a prediction could not reach the server")
	}
}

func TestClientTrainingSplitLayoutAndRetry(t *testing.T) {
	ctx := context.Background()
	pred := startFake(t, fakepredictor.Behavior{TTFTms: 1})
	train := startFake(t, fakepredictor.Behavior{Down: true})
	c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{pred.URL()}, TrainingURL: train.URL(), Timeout: 500 * time.Millisecond, MaxTrainingBatchSize: 2})
	entries := []predictor.TrainingEntry{
		{InputTokenLength: 1, ActualTTFT: 10, ActualTPOT: 1},
		{InputTokenLength: 2, ActualTTFT: 20, ActualTPOT: 2},
		{InputTokenLength: 3, ActualTTFT: 30, ActualTPOT: 3},
	}
	if err := c.AddTrainingData(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err == nil {
		t.Fatal("Flush to a down training server: want an error")
	}
	if sent, buffered, dropped, _ := c.TrainingStats(); sent != 0 || buffered != 3 || dropped != 0 {
		t.Fatalf("after a failed send: sent %d buffered %d dropped %d, want 0 3 0", sent, buffered, dropped)
	}
	_ = train.Update(func(b *fakepredictor.Behavior) { b.Down = false })
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush after recovery: %v", err)
	}
	got := train.TrainingEntries()
	var lens []int
	for _, e := range got {
		lens = append(lens, e.InputTokenLength)
		if e.Timestamp.IsZero() {
			t.Errorf("entry %d reached the training server without a timestamp", e.InputTokenLength)
		}
	}
	if diff := cmp.Diff([]int{1, 2, 3}, lens); diff != "" {
		t.Fatalf("training server received (-want +got):\n%s", diff)
	}
	if calls := train.Calls(); calls.AddTrainingData < 3 { // 1 refused + 2 batches of ≤ 2
		t.Fatalf("training calls %+v, want ≥ 3", calls)
	}
	if pred.Calls().AddTrainingData != 0 {
		t.Fatal("training entries went to the prediction server")
	}
	if err := c.AddTrainingData(ctx, []predictor.TrainingEntry{{ActualTTFT: -1}}); err == nil || !strings.Contains(err.Error(), "entries[0].actual_ttft_ms") {
		t.Fatalf("invalid entry: error %v, want one naming entries[0].actual_ttft_ms", err)
	}
}

func TestClientBufferBound(t *testing.T) {
	ctx := context.Background()
	train := startFake(t, fakepredictor.Behavior{Down: true})
	c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{train.URL()}, MaxTrainingBuffer: 5, Timeout: 200 * time.Millisecond})
	for i := range 12 {
		if err := c.AddTrainingData(ctx, []predictor.TrainingEntry{{InputTokenLength: i, ActualTTFT: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Flush(ctx)
	_, buffered, dropped, _ := c.TrainingStats()
	if buffered != 5 || dropped != 7 {
		t.Fatalf("buffered %d dropped %d, want 5 and 7 (bound 5, 12 added)", buffered, dropped)
	}
	_ = train.Update(func(b *fakepredictor.Behavior) { b.Down = false })
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var lens []int
	for _, e := range train.TrainingEntries() {
		lens = append(lens, e.InputTokenLength)
	}
	if diff := cmp.Diff([]int{7, 8, 9, 10, 11}, lens); diff != "" {
		t.Fatalf("kept entries (-want newest five +got):\n%s", diff)
	}
}

func TestClientRoundRobin(t *testing.T) {
	a := startFake(t, fakepredictor.Behavior{TTFTms: 1})
	b := startFake(t, fakepredictor.Behavior{TTFTms: 2})
	c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{a.URL(), b.URL()}})
	var got []float64
	for range 4 {
		p, err := c.PredictBulk(context.Background(), oneRequest)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[0].TTFT)
	}
	if diff := cmp.Diff([]float64{1, 2, 1, 2}, got); diff != "" {
		t.Fatalf("answers (-want +got):\n%s", diff)
	}
}

func TestClientConfigErrors(t *testing.T) {
	tests := []struct {
		cfg  predictor.ClientConfig
		want string
	}{
		{predictor.ClientConfig{}, "predictionURLs"},
		{predictor.ClientConfig{PredictionURLs: []string{"localhost:8001"}}, "predictionURLs[0]"},
		{predictor.ClientConfig{PredictionURLs: []string{"http://a:1", "ftp://b"}}, "predictionURLs[1]"},
		{predictor.ClientConfig{PredictionURLs: []string{"http://a:1"}, TrainingURL: "/x"}, "trainingURL"},
		{predictor.ClientConfig{PredictionURLs: []string{"http://a:1"}, Timeout: -1}, "timeout"},
		{predictor.ClientConfig{PredictionURLs: []string{"http://a:1"}, MaxTrainingBuffer: -1}, "maxTrainingBuffer"},
	}
	for _, tc := range tests {
		if _, err := predictor.NewClient(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClient(%+v) error = %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
	env := map[string]string{"PREDICTION_SERVER_URL": "http://p1:8001, http://p2:8001", "TRAINING_SERVER_URL": "http://t:8000"}
	cfg := predictor.ClientConfigFromEnv(func(k string) string { return env[k] })
	if diff := cmp.Diff(predictor.ClientConfig{PredictionURLs: []string{"http://p1:8001", "http://p2:8001"}, TrainingURL: "http://t:8000"}, cfg); diff != "" {
		t.Errorf("ClientConfigFromEnv (-want +got):\n%s", diff)
	}
}

func TestFuncAnswersAndAdmin(t *testing.T) {
	ctx := context.Background()
	f := startFake(t, fakepredictor.Behavior{})
	f.SetFunc(func(r predictor.PredictionRequest) (float64, float64) { return 1000 * r.KVCachePercentage, 1 })
	c := newClient(t, predictor.ClientConfig{PredictionURLs: []string{f.URL()}, Timeout: time.Second})
	p, err := c.PredictBulk(ctx, []predictor.PredictionRequest{{KVCachePercentage: 0.25}, {KVCachePercentage: 0.5}})
	if err != nil || p[0].TTFT != 250 || p[1].TTFT != 500 {
		t.Fatalf("func answers = %+v, %v", p, err)
	}
	post := func(body string) (int, string) {
		resp, err := http.Post(f.URL()+"/admin/behavior", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		body     string
		code     int
		contains string
	}{
		{`{"errorStatus": 502, "delay": "10ms"}`, 200, `"delay":"10ms"`},
		{`{"errorStatus": 200}`, 400, "errorStatus"},
		{`{"delay": "soon"}`, 400, "delay"},
		{`{"ttftMs": -1}`, 400, "ttftMs"},
		{`{`, 400, "malformed JSON"},
	}
	for _, tc := range tests {
		code, body := post(tc.body)
		if code != tc.code || !strings.Contains(body, tc.contains) {
			t.Errorf("POST /admin/behavior %s: %d %s, want %d containing %q", tc.body, code, body, tc.code, tc.contains)
		}
	}
	// The refused posts left the first one in force.
	if b := f.Behavior(); b.ErrorStatus != 502 || b.Delay != 10*time.Millisecond {
		t.Fatalf("behaviour after refused posts = %+v", b)
	}
	if _, err := c.PredictBulk(ctx, oneRequest); err == nil || !strings.Contains(err.Error(), "status 502") {
		t.Fatalf("after admin errorStatus 502: %v", err)
	}
}
