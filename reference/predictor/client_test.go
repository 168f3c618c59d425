package predictor

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"
)

// TestClientAgainstServer trains and queries eppkit's server through the HTTP client: the
// training reaches the model, readiness follows /status, and predictions over HTTP equal the
// in-process model's.
func TestClientAgainstServer(t *testing.T) {
	const seed = 31
	ctx := context.Background()
	m, err := NewModel(Config{MinSamples: 50, RetrainEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(m, ServerOptions{}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{PredictionURLs: []string{srv.URL}, TrainingURL: srv.URL, Timeout: 5 * time.Second, MaxTrainingBatchSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(ctx); err != nil || st.IsReady || c.Ready() {
		t.Fatalf("before training: status %+v, %v, Ready %v; want not ready", st, err, c.Ready())
	}
	rng := rand.New(rand.NewPCG(seed, 8))
	if err := c.AddTrainingData(ctx, entries(rng, 300, 0.05)); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if sent, buffered, dropped, lastErr := c.TrainingStats(); sent != 300 || buffered != 0 || dropped != 0 || lastErr != nil {
		t.Fatalf("training stats: sent %d buffered %d dropped %d err %v", sent, buffered, dropped, lastErr)
	}
	m.Wait()
	if st := m.Stats(); st.TTFTSeen != 300 || st.Trainings != 1 {
		t.Fatalf("server model after 300 entries in batches of 64: %+v", st)
	}
	if st, err := c.Status(ctx); err != nil || !st.IsReady || !c.Ready() || st.LastModelLoad == nil {
		t.Fatalf("after training: status %+v, %v, Ready %v; want ready", st, err, c.Ready())
	}
	reqs := make([]PredictionRequest, 8)
	for i := range reqs {
		reqs[i] = randomRequest(rng)
	}
	overHTTP, err := c.PredictBulk(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	local, err := m.PredictBulk(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if overHTTP[i].TTFT != local[i].TTFT || overHTTP[i].TPOT != local[i].TPOT || !overHTTP[i].LastModelLoad.Equal(*local[i].LastModelLoad) {
			t.Fatalf("row %d: over HTTP %+v, in process %+v", i, overHTTP[i], local[i])
		}
	}
	if _, err := c.PredictBulk(ctx, []PredictionRequest{{KVCachePercentage: 2}}); err == nil {
		t.Fatal("invalid request: want a client-side validation error")
	}
}
