package predictor

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
)

// traceFile is a trace collected from the fake fleet by testdata/tracegen (see its doc comment
// for the command; seed 1, 4 members, 1500 requests).
const traceFile = "testdata/fleet-trace.jsonl"

// loadTrace reads traceFile, or the file named by env EPPKIT_PREDICTOR_TRACE.
func loadTrace(t *testing.T) []TrainingEntry {
	t.Helper()
	path := traceFile
	if p := os.Getenv("EPPKIT_PREDICTOR_TRACE"); p != "" {
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s (regenerate with go run ./reference/predictor/testdata/tracegen): %v", path, err)
	}
	defer f.Close()
	var out []TrainingEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e TrainingEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Completion order is the order lines were written; sort by dispatch time for a temporal split.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp.Before(out[j].Timestamp) })
	return out
}

// minTPOTms is the smallest measured TPOT counted in MAPE: the fake's inter-token latency is
// 12 ± 2 ms, so a TPOT below 1 ms means the client read the tokens in one burst from an
// overloaded machine (a handful of rows per trace); such rows would dominate a relative error.
const minTPOTms = 1.0

// evalResult is one model variant's held-out scores.
type evalResult struct {
	ttftMAPE, tpotMAPE         float64 // mean objective
	ttftCover, tpotCover       float64 // quantile objective: fraction of actual ≤ predicted
	ttftGaussCov, tpotGaussCov float64 // mean + z·predictive sd (upstream's quantile rule)
	nMAPE                      float64 // TPOT rows in the TPOT MAPE (actual ≥ minTPOTms)
}

func evaluate(t *testing.T, train, held []TrainingEntry, features FeatureSet, q float64, method string) evalResult {
	t.Helper()
	ctx := context.Background()
	fit := func(objective string) []PredictionResponse {
		m, err := NewModel(Config{Objective: objective, Quantile: q, QuantileMethod: method, Features: features, MinSamples: 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddTrainingData(ctx, train); err != nil {
			t.Fatal(err)
		}
		if err := m.Retrain(); err != nil {
			t.Fatal(err)
		}
		reqs := make([]PredictionRequest, len(held))
		for i := range held {
			reqs[i] = held[i].Request()
		}
		p, err := m.PredictBulk(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mean, quant := fit(ObjectiveMean), fit(ObjectiveQuantile)
	z := zOf(q)
	var r evalResult
	var nT, nP float64
	for i, e := range held {
		if e.ActualTTFT > 0 {
			nT++
			r.ttftMAPE += math.Abs(mean[i].TTFT-e.ActualTTFT) / e.ActualTTFT
			r.ttftCover += b2f(e.ActualTTFT <= quant[i].TTFT)
			r.ttftGaussCov += b2f(e.ActualTTFT <= mean[i].TTFT+z*mean[i].TTFTUncertainty)
		}
		if e.ActualTPOT > 0 {
			nP++
			if e.ActualTPOT >= minTPOTms {
				r.tpotMAPE += math.Abs(mean[i].TPOT-e.ActualTPOT) / e.ActualTPOT
				r.nMAPE++
			}
			r.tpotCover += b2f(e.ActualTPOT <= quant[i].TPOT)
			r.tpotGaussCov += b2f(e.ActualTPOT <= mean[i].TPOT+z*mean[i].TPOTUncertainty)
		}
	}
	r.ttftMAPE, r.ttftCover, r.ttftGaussCov = r.ttftMAPE/nT, r.ttftCover/nT, r.ttftGaussCov/nT
	r.tpotMAPE, r.tpotCover, r.tpotGaussCov = r.tpotMAPE/r.nMAPE, r.tpotCover/nP, r.tpotGaussCov/nP
	return r
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// zOf is the standard normal quantile for the levels upstream hard-codes (training_server.py:
// 1.28 for 0.9, 2.0 for 0.95, else 0.674).
func zOf(q float64) float64 {
	switch q {
	case 0.9:
		return 1.28
	case 0.95:
		return 2.0
	}
	return 0.674
}

// constantBaseline scores predicting the training mean (MAPE) and the training q-quantile
// (coverage) for every held-out request.
func constantBaseline(train, held []TrainingEntry, q float64) evalResult {
	var ttfts, tpots []float64
	for _, e := range train {
		if e.ActualTTFT > 0 {
			ttfts = append(ttfts, e.ActualTTFT)
		}
		if e.ActualTPOT > 0 {
			tpots = append(tpots, e.ActualTPOT)
		}
	}
	avg := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	mT, mP := avg(ttfts), avg(tpots)
	qT, qP := quantileOf(ttfts, q), quantileOf(tpots, q)
	var r evalResult
	var nT, nP float64
	for _, e := range held {
		if e.ActualTTFT > 0 {
			nT++
			r.ttftMAPE += math.Abs(mT-e.ActualTTFT) / e.ActualTTFT
			r.ttftCover += b2f(e.ActualTTFT <= qT)
		}
		if e.ActualTPOT > 0 {
			nP++
			if e.ActualTPOT >= minTPOTms {
				r.tpotMAPE += math.Abs(mP-e.ActualTPOT) / e.ActualTPOT
				r.nMAPE++
			}
			r.tpotCover += b2f(e.ActualTPOT <= qP)
		}
	}
	r.ttftMAPE, r.ttftCover = r.ttftMAPE/nT, r.ttftCover/nT
	r.tpotMAPE, r.tpotCover = r.tpotMAPE/r.nMAPE, r.tpotCover/nP
	return r
}

// prequential replays the trace in dispatch order through a Model the way the EPP uses it:
// each request is predicted with the current model before its outcome is added, and the model is
// refitted every `every` samples (after a warm-up of `every`). It returns the scores over the
// predicted requests.
func prequential(t *testing.T, all []TrainingEntry, features FeatureSet, q float64, method string, every int) (r evalResult, n int) {
	t.Helper()
	ctx := context.Background()
	mk := func(objective string) *Model {
		m, err := NewModel(Config{Objective: objective, Quantile: q, QuantileMethod: method, Features: features, MinSamples: every, RetrainEvery: 1 << 30, RetrainInterval: 1 << 62})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	mean, quant := mk(ObjectiveMean), mk(ObjectiveQuantile)
	var nT, nP float64
	for i, e := range all {
		if i >= every {
			req := []PredictionRequest{e.Request()}
			pm, err1 := mean.PredictBulk(ctx, req)
			pq, err2 := quant.PredictBulk(ctx, req)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if e.ActualTTFT > 0 {
				nT++
				r.ttftMAPE += math.Abs(pm[0].TTFT-e.ActualTTFT) / e.ActualTTFT
				r.ttftCover += b2f(e.ActualTTFT <= pq[0].TTFT)
				r.ttftGaussCov += b2f(e.ActualTTFT <= pm[0].TTFT+zOf(q)*pm[0].TTFTUncertainty)
			}
			if e.ActualTPOT > 0 {
				nP++
				if e.ActualTPOT >= minTPOTms {
					r.tpotMAPE += math.Abs(pm[0].TPOT-e.ActualTPOT) / e.ActualTPOT
					r.nMAPE++
				}
				r.tpotCover += b2f(e.ActualTPOT <= pq[0].TPOT)
				r.tpotGaussCov += b2f(e.ActualTPOT <= pm[0].TPOT+zOf(q)*pm[0].TPOTUncertainty)
			}
			n++
		}
		for _, m := range []*Model{mean, quant} {
			if err := m.AddTrainingData(ctx, []TrainingEntry{e}); err != nil {
				t.Fatal(err)
			}
			m.Wait()
			if (i+1)%every == 0 {
				if err := m.Retrain(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	r.ttftMAPE, r.ttftCover, r.ttftGaussCov = r.ttftMAPE/nT, r.ttftCover/nT, r.ttftGaussCov/nT
	r.tpotMAPE, r.tpotCover, r.tpotGaussCov = r.tpotMAPE/r.nMAPE, r.tpotCover/nP, r.tpotGaussCov/nP
	return r, n
}

func logRow(t *testing.T, name string, r evalResult) {
	t.Logf("%-34s %9.3f %9.3f %11.3f %11.3f %13.3f %13.3f", name, r.ttftMAPE, r.tpotMAPE, r.ttftCover, r.tpotCover, r.ttftGaussCov, r.tpotGaussCov)
}

// TestFleetTraceEvaluation reports held-out MAPE (mean objective) and p90 coverage (quantile
// objective; "gauss" is upstream's mean + 1.28·sd rule on the same fit) on the fake-fleet trace
// three ways: a random 70/30 split (no drift), a temporal 70/30 split (the load pattern of the
// last 30 % differs), and a prequential replay with a refit every 100 samples (how the EPP uses
// it). It holds the model to beating the constant baseline, and to p90 coverage within ±0.05 on
// the random split (n = 450, binomial sd ≈ 0.014) and in [0.80, 0.96] in the replay.
func TestFleetTraceEvaluation(t *testing.T) {
	all := loadTrace(t)
	const q = 0.9
	shuffled := append([]TrainingEntry(nil), all...)
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	cut := len(all) * 7 / 10
	t.Logf("trace %s (EPPKIT_PREDICTOR_TRACE overrides): %d entries; splits 70/30", traceFile, len(all))
	t.Logf("%-34s %9s %9s %11s %11s %13s %13s", "variant", "TTFT MAPE", "TPOT MAPE", "TTFT p90cov", "TPOT p90cov", "TTFT gausscov", "TPOT gausscov")
	var randomFull evalResult
	for _, sp := range []struct {
		name string
		es   []TrainingEntry
	}{{"random", shuffled}, {"temporal", all}} {
		train, held := sp.es[:cut], sp.es[cut:]
		base := constantBaseline(train, held, q)
		client := evaluate(t, train, held, FeaturesClient, q, QuantileRelative)
		fullAdd := evaluate(t, train, held, FeaturesFull, q, QuantileAdditive)
		full := evaluate(t, train, held, FeaturesFull, q, QuantileRelative)
		logRow(t, sp.name+": constant (train mean/p90)", base)
		logRow(t, sp.name+": client, relative", client)
		logRow(t, sp.name+": full, additive", fullAdd)
		logRow(t, sp.name+": full, relative (default)", full)
		t.Logf("%s: TPOT MAPE over %v of %d held-out rows (actual ≥ %v ms)", sp.name, full.nMAPE, len(held), minTPOTms)
		if !(full.ttftMAPE < 0.8*base.ttftMAPE) || !(full.tpotMAPE <= base.tpotMAPE) {
			t.Errorf("%s split: full MAPE TTFT %.3f TPOT %.3f does not beat the baseline %.3f / %.3f", sp.name, full.ttftMAPE, full.tpotMAPE, base.ttftMAPE, base.tpotMAPE)
		}
		if sp.name == "random" {
			randomFull = full
		}
	}
	for name, c := range map[string]float64{"TTFT": randomFull.ttftCover, "TPOT": randomFull.tpotCover} {
		if math.Abs(c-q) > 0.05 {
			t.Errorf("random split: full %s p90 coverage %.3f, want within 0.05 of %.2f", name, c, q)
		}
	}
	preqAdd, _ := prequential(t, all, FeaturesFull, q, QuantileAdditive, 100)
	logRow(t, "replay (refit/100): full, additive", preqAdd)
	preq, n := prequential(t, all, FeaturesFull, q, QuantileRelative, 100)
	logRow(t, "replay (refit/100): full, relative", preq)
	t.Logf("replay predicted %d requests", n)
	// The replay sees the load ramp up before the model has: coverage falls below 0.9 under
	// drift. Bound it at [0.80, 0.96] (n = 1400, binomial sd ≈ 0.008), which the additive
	// method fails on this trace (TTFT 0.789) — the reason relative is the default.
	for name, c := range map[string]float64{"TTFT": preq.ttftCover, "TPOT": preq.tpotCover} {
		if c < 0.80 || c > 0.96 {
			t.Errorf("replay: %s p90 coverage %.3f over n=%d, want in [0.80, 0.96]", name, c, n)
		}
	}
}
