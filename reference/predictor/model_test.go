package predictor

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// syntheticLaw is a known linear law over the full feature set, in ms.
func syntheticLaw(r *PredictionRequest) (ttft, tpot float64) {
	eff := (1 - r.PrefixCacheScore) * float64(r.InputTokenLength)
	ttft = 12 + 0.08*eff + 25*float64(r.NumRequestWaiting) + 3*float64(r.NumRequestRunning) + 40*r.KVCachePercentage + 0.002*float64(r.PrefillTokensInFlight)
	tpot = 6 + 0.9*float64(r.NumRequestRunning) + 8*r.KVCachePercentage + 0.001*float64(r.NumTokensGenerated)
	return ttft, tpot
}

func randomRequest(rng *rand.Rand) PredictionRequest {
	return PredictionRequest{
		KVCachePercentage:     rng.Float64(),
		InputTokenLength:      rng.IntN(4000),
		NumRequestWaiting:     rng.IntN(15),
		NumRequestRunning:     rng.IntN(20),
		NumTokensGenerated:    rng.IntN(500),
		PrefixCacheScore:      rng.Float64(),
		PrefillTokensInFlight: int64(rng.IntN(8000)),
		DecodeTokensInFlight:  int64(rng.IntN(2000)),
	}
}

// entries draws n entries from the synthetic law with multiplicative noise of relative sd noise.
func entries(rng *rand.Rand, n int, noise float64) []TrainingEntry {
	out := make([]TrainingEntry, n)
	for i := range out {
		r := randomRequest(rng)
		ttft, tpot := syntheticLaw(&r)
		out[i] = TrainingEntry{
			KVCachePercentage: r.KVCachePercentage, InputTokenLength: r.InputTokenLength,
			NumRequestWaiting: r.NumRequestWaiting, NumRequestRunning: r.NumRequestRunning,
			NumTokensGenerated: r.NumTokensGenerated, PrefixCacheScore: r.PrefixCacheScore,
			PrefillTokensInFlight: r.PrefillTokensInFlight, DecodeTokensInFlight: r.DecodeTokensInFlight,
			ActualTTFT: ttft * (1 + noise*rng.NormFloat64()), ActualTPOT: tpot * (1 + noise*rng.NormFloat64()),
		}
		out[i].ActualTTFT = math.Max(out[i].ActualTTFT, 0.001)
		out[i].ActualTPOT = math.Max(out[i].ActualTPOT, 0.001)
	}
	return out
}

func TestLearnsSyntheticLinearLaw(t *testing.T) {
	const seed = 7
	tests := []struct {
		name     string
		features FeatureSet
		noise    float64
		// maxMAPE is the bound on held-out TTFT and TPOT MAPE against the noiseless law; minTTFT,
		// when set, is a lower bound instead (negative control).
		maxMAPE, minTTFT float64
	}{
		{"full features, no noise", FeaturesFull, 0, 0.05, 0},
		{"full features, 5% noise", FeaturesFull, 0.05, 0.05, 0},
		// The client set lacks (1 − prefix)·input, so it cannot express the TTFT law.
		{"negative control: client features miss the interaction", FeaturesClient, 0, 0, 0.05},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			m, err := NewModel(Config{Objective: ObjectiveMean, Features: tc.features, MinSamples: 50, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.AddTrainingData(context.Background(), entries(rng, 3000, tc.noise)); err != nil {
				t.Fatal(err)
			}
			if err := m.Retrain(); err != nil {
				t.Fatal(err)
			}
			const n = 1000
			reqs := make([]PredictionRequest, n)
			for i := range reqs {
				reqs[i] = randomRequest(rng)
			}
			preds, err := m.PredictBulk(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			var ttftAPE, tpotAPE float64
			for i := range reqs {
				ttft, tpot := syntheticLaw(&reqs[i])
				ttftAPE += math.Abs(preds[i].TTFT-ttft) / ttft
				tpotAPE += math.Abs(preds[i].TPOT-tpot) / tpot
			}
			ttftMAPE, tpotMAPE := ttftAPE/n, tpotAPE/n
			t.Logf("seed=%d n=%d held-out MAPE: TTFT %.4f, TPOT %.4f", seed, n, ttftMAPE, tpotMAPE)
			if tc.minTTFT > 0 {
				if ttftMAPE < tc.minTTFT {
					t.Errorf("seed=%d: TTFT MAPE %.4f, want ≥ %.2f (the features cannot express the law)", seed, ttftMAPE, tc.minTTFT)
				}
			} else if ttftMAPE > tc.maxMAPE || tpotMAPE > tc.maxMAPE {
				t.Errorf("seed=%d: MAPE TTFT %.4f TPOT %.4f, want ≤ %.2f", seed, ttftMAPE, tpotMAPE, tc.maxMAPE)
			}
			if !m.Ready() {
				t.Error("Ready() = false after training")
			}
		})
	}
}

func TestBayesianRidgeRecoversCoefficients(t *testing.T) {
	const seed = 11
	rng := rand.New(rand.NewPCG(seed, 2))
	m, err := NewModel(Config{Objective: ObjectiveMean, MinSamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddTrainingData(context.Background(), entries(rng, 2000, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.Retrain(); err != nil {
		t.Fatal(err)
	}
	c := m.Coefficients()
	want := map[string]float64{fEffectiveInput: 0.08, fWaiting: 25, fRunning: 3, fKV: 40, fPrefillTIF: 0.002}
	for name, w := range want {
		if got := c.TTFTCoeffs[name]; math.Abs(got-w) > 0.01*math.Abs(w) {
			t.Errorf("seed=%d: ttft_coef{feature=%q} = %v, want %v ±1%%", seed, name, got, w)
		}
	}
	if math.Abs(c.TTFTIntercept-12) > 0.5 {
		t.Errorf("seed=%d: ttft_intercept = %v, want 12 ±0.5", seed, c.TTFTIntercept)
	}
	if got := c.TPOTCoeffs[fRunning]; math.Abs(got-0.9) > 0.009 {
		t.Errorf("seed=%d: tpot_coef{feature=num_request_running} = %v, want 0.9 ±1%%", seed, got)
	}
}

func TestQuantileObjectiveCoverage(t *testing.T) {
	const seed = 3
	rng := rand.New(rand.NewPCG(seed, 3))
	tests := []struct {
		q float64
	}{{0.5}, {0.9}, {0.95}}
	// Additive Gaussian noise (sd 10 ms): the residual quantile is exact, so coverage on n=4000
	// held-out samples must be within ±0.03 of q (binomial sd ≤ 0.008).
	for _, tc := range tests {
		m, err := NewModel(Config{Quantile: tc.q, QuantileMethod: QuantileAdditive, MinSamples: 10})
		if err != nil {
			t.Fatal(err)
		}
		gen := func(n int) []TrainingEntry {
			es := entries(rng, n, 0)
			for i := range es {
				es[i].ActualTTFT += 10 * rng.NormFloat64()
				es[i].ActualTTFT = math.Max(es[i].ActualTTFT, 0.001)
			}
			return es
		}
		if err := m.AddTrainingData(context.Background(), gen(4000)); err != nil {
			t.Fatal(err)
		}
		if err := m.Retrain(); err != nil {
			t.Fatal(err)
		}
		held := gen(4000)
		reqs := make([]PredictionRequest, len(held))
		for i := range held {
			reqs[i] = held[i].Request()
		}
		preds, err := m.PredictBulk(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		covered := 0
		for i := range held {
			if held[i].ActualTTFT <= preds[i].TTFT {
				covered++
			}
		}
		cov := float64(covered) / float64(len(held))
		if math.Abs(cov-tc.q) > 0.03 {
			t.Errorf("seed=%d q=%v: coverage %.4f over n=%d, want within ±0.03", seed, tc.q, cov, len(held))
		}
		if preds[0].ObjectiveType != ObjectiveQuantile || preds[0].Quantile != tc.q {
			t.Errorf("response objective %q quantile %v", preds[0].ObjectiveType, preds[0].Quantile)
		}
	}
}

func TestPriorUntilEnoughSamples(t *testing.T) {
	m, err := NewModel(Config{MinSamples: 20, PriorTTFTms: 77, PriorTPOTms: 9})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	req := []PredictionRequest{randomRequest(rng)}
	for step, n := range []int{0, 10, 9} {
		if n > 0 {
			if err := m.AddTrainingData(ctx, entries(rng, n, 0.01)); err != nil {
				t.Fatal(err)
			}
		}
		m.Wait()
		if m.Ready() {
			t.Fatalf("step %d: Ready() = true with fewer than MinSamples", step)
		}
		p, err := m.PredictBulk(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if p[0].TTFT != 77 || p[0].TPOT != 9 || p[0].LastModelLoad != nil {
			t.Fatalf("step %d: prior prediction = %+v, want ttft 77 tpot 9, no last_model_load", step, p[0])
		}
	}
	if err := m.Retrain(); err == nil {
		t.Fatal("Retrain with 19 samples: want an error")
	}
	if err := m.AddTrainingData(ctx, entries(rng, 1, 0.01)); err != nil {
		t.Fatal(err)
	}
	m.Wait()
	if !m.Ready() {
		t.Fatal("Ready() = false after MinSamples samples (the first fit is due at once)")
	}
	p, _ := m.PredictBulk(ctx, req)
	if p[0].TTFT == 77 || p[0].LastModelLoad == nil {
		t.Fatalf("trained prediction still the prior: %+v", p[0])
	}
}

func TestRetrainOnCountAndInterval(t *testing.T) {
	ctx := context.Background()
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m, err := NewModel(Config{MinSamples: 10, RetrainEvery: 50, RetrainInterval: time.Minute, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	add := func(n int) {
		t.Helper()
		if err := m.AddTrainingData(ctx, entries(rng, n, 0.02)); err != nil {
			t.Fatal(err)
		}
		m.Wait()
	}
	steps := []struct {
		name      string
		add       int
		advance   time.Duration
		predict   bool
		wantTrain int
	}{
		{"first fit once MinSamples arrive", 10, 0, false, 1},
		{"below count, interval not elapsed", 20, 0, false, 1},
		{"count reached (20+30)", 30, 0, false, 2},
		{"a few more, interval not elapsed", 5, 30 * time.Second, false, 2},
		{"interval elapsed, noticed on predict", 0, 31 * time.Second, true, 3},
		{"interval elapsed but no new samples", 0, 2 * time.Minute, true, 3},
	}
	for _, s := range steps {
		fc.Step(s.advance)
		if s.add > 0 {
			add(s.add)
		}
		if s.predict {
			if _, err := m.PredictBulk(ctx, []PredictionRequest{randomRequest(rng)}); err != nil {
				t.Fatal(err)
			}
			m.Wait()
		}
		if got := m.Stats().Trainings; got != s.wantTrain {
			t.Fatalf("%s: trainings = %d, want %d", s.name, got, s.wantTrain)
		}
	}
}

func TestBucketsBoundedNewestWins(t *testing.T) {
	ctx := context.Background()
	m, err := NewModel(Config{MaxPerBucket: 3, MinSamples: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// Five entries in one bucket (waiting 0, KV 0.5, prefix 0.1): only the newest three stay.
	for i := range 5 {
		e := TrainingEntry{KVCachePercentage: 0.5, PrefixCacheScore: 0.1, InputTokenLength: 100, ActualTTFT: float64(i + 1), ActualTPOT: 1}
		if err := m.AddTrainingData(ctx, []TrainingEntry{e}); err != nil {
			t.Fatal(err)
		}
	}
	// And one in another bucket (waiting 12, KV 1.0, prefix 1.0 → the last bucket).
	if err := m.AddTrainingData(ctx, []TrainingEntry{{KVCachePercentage: 1, PrefixCacheScore: 1, NumRequestWaiting: 12, ActualTTFT: 9, ActualTPOT: 1}}); err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	b := bucketIndex(&PredictionRequest{KVCachePercentage: 0.5, PrefixCacheScore: 0.1})
	if st.TTFTBuckets[b] != 3 || st.TTFTBuckets[numBuckets-1] != 1 || st.TTFTSamples != 4 || st.TTFTSeen != 6 {
		t.Fatalf("buckets: got [%d]=%d last=%d stored=%d seen=%d, want 3, 1, 4, 6", b, st.TTFTBuckets[b], st.TTFTBuckets[numBuckets-1], st.TTFTSamples, st.TTFTSeen)
	}
	m.mu.Lock()
	var ys []float64
	for _, s := range m.ttft.buckets[b].buf {
		ys = append(ys, s.y)
	}
	m.mu.Unlock()
	got := map[float64]bool{}
	for _, y := range ys {
		got[y] = true
	}
	if !got[3] || !got[4] || !got[5] || got[1] || got[2] {
		t.Fatalf("bucket holds TTFTs %v, want the newest three {3,4,5}", ys)
	}
}

func TestBucketIndex(t *testing.T) {
	tests := []struct {
		waiting          int
		kv, prefix       float64
		wantQ, wK, wantP int
	}{
		{0, 0, 0, 0, 0, 0},
		{1, 0.049, 0.24, 1, 0, 0},
		{2, 0.05, 0.25, 1, 1, 1},
		{3, 0.5, 0.5, 2, 10, 2},
		{5, 0.99, 0.74, 2, 19, 2},
		{6, 1, 0.75, 3, 19, 3},
		{10, 1, 1, 3, 19, 3},
		{11, 0.2, 0.9, 4, 4, 3},
		{500, 0.2, 0.9, 4, 4, 3},
	}
	for _, tc := range tests {
		got := bucketIndex(&PredictionRequest{NumRequestWaiting: tc.waiting, KVCachePercentage: tc.kv, PrefixCacheScore: tc.prefix})
		want := (tc.wantQ*KVBuckets+tc.wK)*PrefixBuckets + tc.wantP
		if got != want {
			t.Errorf("waiting=%d kv=%v prefix=%v: bucket %d, want %d", tc.waiting, tc.kv, tc.prefix, got, want)
		}
	}
}

func TestValidationNamesTheField(t *testing.T) {
	ctx := context.Background()
	m, err := NewModel(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		entry TrainingEntry
		want  string
	}{
		{"kv above 1", TrainingEntry{KVCachePercentage: 1.5}, "entries[0].kv_cache_percentage"},
		{"kv NaN", TrainingEntry{KVCachePercentage: math.NaN()}, "entries[0].kv_cache_percentage"},
		{"prefix negative", TrainingEntry{PrefixCacheScore: -0.1}, "entries[0].prefix_cache_score"},
		{"input negative", TrainingEntry{InputTokenLength: -1}, "entries[0].input_token_length"},
		{"waiting negative", TrainingEntry{NumRequestWaiting: -1}, "entries[0].num_request_waiting"},
		{"running negative", TrainingEntry{NumRequestRunning: -1}, "entries[0].num_request_running"},
		{"generated negative", TrainingEntry{NumTokensGenerated: -1}, "entries[0].num_tokens_generated"},
		{"prefill tif negative", TrainingEntry{PrefillTokensInFlight: -1}, "entries[0].prefill_tokens_in_flight"},
		{"decode tif negative", TrainingEntry{DecodeTokensInFlight: -1}, "entries[0].decode_tokens_in_flight"},
		{"ttft negative", TrainingEntry{ActualTTFT: -1}, "entries[0].actual_ttft_ms"},
		{"tpot inf", TrainingEntry{ActualTPOT: math.Inf(1)}, "entries[0].actual_tpot_ms"},
		{"pod type unknown", TrainingEntry{PodType: "gpu"}, "entries[0].pod_type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := m.AddTrainingData(ctx, []TrainingEntry{tc.entry})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AddTrainingData error = %v, want it to name %q", err, tc.want)
			}
			_, err = m.PredictBulk(ctx, []PredictionRequest{{}, tc.entry.Request()})
			if strings.HasPrefix(tc.want, "entries[0].actual") {
				if err != nil {
					t.Fatalf("PredictBulk of a valid request: %v", err)
				}
				return
			}
			wantReq := strings.Replace(tc.want, "entries[0]", "requests[1]", 1)
			if err == nil || !strings.Contains(err.Error(), wantReq) {
				t.Fatalf("PredictBulk error = %v, want it to name %q", err, wantReq)
			}
		})
	}
	if st := m.Stats(); st.TTFTSeen != 0 || st.TPOTSeen != 0 {
		t.Fatalf("refused batches were stored: %+v", st)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{Objective: "median"}, "objective"},
		{Config{Quantile: 1}, "quantile"},
		{Config{Quantile: -0.5}, "quantile"},
		{Config{Features: "trees"}, "features"},
		{Config{MaxPerBucket: -1}, "maxPerBucket"},
		{Config{MinSamples: 1}, "minSamples"},
		{Config{RetrainInterval: -time.Second}, "retrainInterval"},
		{Config{RetrainEvery: -1}, "retrainEvery"},
		{Config{PriorTTFTms: math.NaN()}, "priorTTFTms"},
	}
	for _, tc := range tests {
		if _, err := NewModel(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewModel(%+v) error = %v, want it to name %q", tc.cfg, err, tc.want)
		}
	}
}

func TestCoefficientsReproducePredictions(t *testing.T) {
	ctx := context.Background()
	for _, fs := range []FeatureSet{FeaturesFull, FeaturesClient} {
		m, err := NewModel(Config{Features: fs, MinSamples: 10})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(9, uint64(len(fs))))
		check := func(stage string) {
			c := m.Coefficients()
			tt, tp := m.FeatureNames()
			reqs := make([]PredictionRequest, 200)
			for i := range reqs {
				reqs[i] = randomRequest(rng)
			}
			preds, err := m.PredictBulk(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i := range reqs {
				ttft, tpot := c.TTFTIntercept, c.TPOTIntercept
				for _, n := range tt {
					ttft += c.TTFTCoeffs[n] * featureValue(n, &reqs[i])
				}
				for _, n := range tp {
					tpot += c.TPOTCoeffs[n] * featureValue(n, &reqs[i])
				}
				if d := math.Abs(math.Max(0, ttft) - preds[i].TTFT); d > 1e-6*math.Max(1, ttft) {
					t.Fatalf("%s %s: coefficients give TTFT %v, PredictBulk %v", fs, stage, ttft, preds[i].TTFT)
				}
				if d := math.Abs(math.Max(0, tpot) - preds[i].TPOT); d > 1e-6*math.Max(1, tpot) {
					t.Fatalf("%s %s: coefficients give TPOT %v, PredictBulk %v", fs, stage, tpot, preds[i].TPOT)
				}
			}
		}
		check("prior")
		if err := m.AddTrainingData(ctx, entries(rng, 500, 0.1)); err != nil {
			t.Fatal(err)
		}
		if err := m.Retrain(); err != nil {
			t.Fatal(err)
		}
		check("trained")
	}
}

func TestConcurrentTrainAndPredict(t *testing.T) {
	ctx := context.Background()
	m, err := NewModel(Config{MinSamples: 20, RetrainEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(g), 77))
			for range 50 {
				if g%2 == 0 {
					_ = m.AddTrainingData(ctx, entries(rng, 5, 0.1))
				} else {
					_, _ = m.PredictBulk(ctx, []PredictionRequest{randomRequest(rng)})
					_ = m.Coefficients()
					_ = m.Stats()
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	m.Wait()
	if !m.Ready() {
		t.Fatal("not ready after 500 samples")
	}
}
