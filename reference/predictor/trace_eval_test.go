package predictor

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
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

// evalResult is one model variant's held-out scores.
type evalResult struct {
	ttftMAPE, tpotMAPE         float64 // mean objective
	ttftCover, tpotCover       float64 // quantile objective: fraction of actual ≤ predicted
	ttftGaussCov, tpotGaussCov float64 // mean + z·predictive sd (upstream's quantile rule)
}

func evaluate(t *testing.T, train, held []TrainingEntry, features FeatureSet, q float64) evalResult {
	t.Helper()
	ctx := context.Background()
	fit := func(objective string) []PredictionResponse {
		m, err := NewModel(Config{Objective: objective, Quantile: q, Features: features, MinSamples: 10})
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
			r.tpotMAPE += math.Abs(mean[i].TPOT-e.ActualTPOT) / e.ActualTPOT
			r.tpotCover += b2f(e.ActualTPOT <= quant[i].TPOT)
			r.tpotGaussCov += b2f(e.ActualTPOT <= mean[i].TPOT+z*mean[i].TPOTUncertainty)
		}
	}
	r.ttftMAPE, r.ttftCover, r.ttftGaussCov = r.ttftMAPE/nT, r.ttftCover/nT, r.ttftGaussCov/nT
	r.tpotMAPE, r.tpotCover, r.tpotGaussCov = r.tpotMAPE/nP, r.tpotCover/nP, r.tpotGaussCov/nP
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
			r.tpotMAPE += math.Abs(mP-e.ActualTPOT) / e.ActualTPOT
			r.tpotCover += b2f(e.ActualTPOT <= qP)
		}
	}
	r.ttftMAPE, r.ttftCover = r.ttftMAPE/nT, r.ttftCover/nT
	r.tpotMAPE, r.tpotCover = r.tpotMAPE/nP, r.tpotCover/nP
	return r
}

// TestFleetTraceEvaluation reports held-out MAPE (mean objective) and p90 coverage (quantile
// objective) on the fake-fleet trace, temporal split 70/30, for the constant baseline and both
// feature sets, and holds the model to beating the baseline and to a p90 coverage near 0.9.
func TestFleetTraceEvaluation(t *testing.T) {
	all := loadTrace(t)
	cut := len(all) * 7 / 10
	train, held := all[:cut], all[cut:]
	const q = 0.9
	base := constantBaseline(train, held, q)
	full := evaluate(t, train, held, FeaturesFull, q)
	client := evaluate(t, train, held, FeaturesClient, q)
	t.Logf("trace %s (EPPKIT_PREDICTOR_TRACE overrides): %d entries, train %d, held-out %d (temporal split)", traceFile, len(all), len(train), len(held))
	t.Logf("%-22s %10s %10s %12s %12s %14s %14s", "variant", "TTFT MAPE", "TPOT MAPE", "TTFT p90cov", "TPOT p90cov", "TTFT gauss cov", "TPOT gauss cov")
	for _, v := range []struct {
		name string
		r    evalResult
	}{{"constant (train mean/p90)", base}, {"bayesian ridge, client", client}, {"bayesian ridge, full", full}} {
		t.Logf("%-22s %10.3f %10.3f %12.3f %12.3f %14.3f %14.3f", v.name, v.r.ttftMAPE, v.r.tpotMAPE, v.r.ttftCover, v.r.tpotCover, v.r.ttftGaussCov, v.r.tpotGaussCov)
	}
	// The full feature set must beat the constant baseline clearly on TTFT.
	if !(full.ttftMAPE < 0.8*base.ttftMAPE) {
		t.Errorf("full TTFT MAPE %.3f not below 0.8 × baseline %.3f", full.ttftMAPE, base.ttftMAPE)
	}
	if !(full.tpotMAPE <= base.tpotMAPE) {
		t.Errorf("full TPOT MAPE %.3f above the baseline %.3f", full.tpotMAPE, base.tpotMAPE)
	}
	// p90 coverage on n≈450 held-out rows: binomial sd ≈ 0.014; allow ±0.06 for the temporal
	// shift between the halves of the trace.
	for name, c := range map[string]float64{"TTFT": full.ttftCover, "TPOT": full.tpotCover} {
		if math.Abs(c-q) > 0.06 {
			t.Errorf("full %s p90 coverage %.3f, want within 0.06 of %.2f", name, c, q)
		}
	}
}
