package latency

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/eppkit/eppkit/reference/framework"
)

func TestParseSLO(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    SLO
		wantErr string
	}{
		{"none", nil, SLO{}, ""},
		{"blank is none", map[string]string{HeaderTTFTSLO: " "}, SLO{}, ""},
		{"both", map[string]string{HeaderTTFTSLO: "120.5", HeaderTPOTSLO: "15"}, SLO{TTFT: 120.5, TPOT: 15, HasTTFT: true, HasTPOT: true}, ""},
		{"zero is an SLO", map[string]string{HeaderTPOTSLO: "0"}, SLO{HasTPOT: true}, ""},
		{"not a number", map[string]string{HeaderTTFTSLO: "fast"}, SLO{}, HeaderTTFTSLO},
		{"negative", map[string]string{HeaderTPOTSLO: "-1"}, SLO{}, HeaderTPOTSLO},
		{"NaN", map[string]string{HeaderTPOTSLO: "NaN"}, SLO{}, HeaderTPOTSLO},
		{"overflow", map[string]string{HeaderTTFTSLO: "1e999"}, SLO{}, HeaderTTFTSLO},
		{"legacy names", map[string]string{"x-slo-ttft-ms": "100", "x-slo-tpot-ms": "10"}, SLO{TTFT: 100, TPOT: 10, HasTTFT: true, HasTPOT: true}, ""},
		{"current name wins", map[string]string{HeaderTTFTSLO: "50", "x-slo-ttft-ms": "-1"}, SLO{TTFT: 50, HasTTFT: true}, ""},
		{"legacy name named", map[string]string{"x-slo-tpot-ms": "-3"}, SLO{}, "x-slo-tpot-ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSLO(&framework.LLMRequest{Headers: tc.headers})
			if tc.wantErr != "" {
				if !errors.Is(err, framework.ErrBadRequest) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrBadRequest naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("SLO (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeadroom(t *testing.T) {
	tests := []struct {
		name         string
		slo          SLO
		budget       float64
		wantT, wantP float64
	}{
		{"no SLO: 0 − prediction", SLO{}, 0, -100, -10},
		{"TTFT only", SLO{TTFT: 150, HasTTFT: true}, 0, 50, 0},
		{"TPOT only, against the budget", SLO{TPOT: 20, HasTPOT: true}, 8, 0, -2},
		{"both", SLO{TTFT: 80, TPOT: 20, HasTTFT: true, HasTPOT: true}, 30, -20, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gt, gp := Headroom(tc.slo, 100, 10, tc.budget)
			if gt != tc.wantT || gp != tc.wantP {
				t.Fatalf("Headroom = (%v, %v), want (%v, %v)", gt, gp, tc.wantT, tc.wantP)
			}
		})
	}
}

func TestTokenCounter(t *testing.T) {
	tok := `data: {"choices":[{"index":0,"text":"a"}]}` + "\n\n"
	chat := `data: {"choices":[{"index":0,"delta":{"content":"b"}}]}` + "\r\n\r\n"
	role := `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"completion_tokens":3}}` + "\n\n"
	tests := []struct {
		name   string
		chunks []string
		want   int
	}{
		{"one per event", []string{tok, tok, tok}, 3},
		{"several per chunk", []string{tok + chat + tok}, 3},
		{"split anywhere", []string{tok[:5], tok[5:30], tok[30:] + chat[:3], chat[3:]}, 2},
		{"role, usage and done are not tokens", []string{role, usage, "data: [DONE]\n\n"}, 0},
		{"garbage is not a token", []string{"data: {not json\n\n", ": comment\n", "event: x\n"}, 0},
		{"an over-long line is dropped", []string{"data: " + strings.Repeat("x", maxSSELine+10), "\n", tok}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c tokenCounter
			for _, ch := range tc.chunks {
				c.write([]byte(ch))
			}
			if c.tokens != tc.want {
				t.Fatalf("tokens = %d, want %d", c.tokens, tc.want)
			}
		})
	}
}

func TestParameterErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		build func() error
		field string
	}{
		{"producer unknown field", func() error { _, err := DecodeProducerParameters(json.RawMessage(`{"sloBuffer":1}`)); return err }, "sloBuffer"},
		{"producer buffer", func() error { _, err := DecodeProducerParameters(json.RawMessage(`{"sloBufferFactor":0}`)); return err }, "parameters.sloBufferFactor"},
		{"producer training URL", func() error {
			_, err := DecodeProducerParameters(json.RawMessage(`{"predictionServerURLs":["http://a:1"]}`))
			return err
		}, "parameters.trainingServerURL"},
		{"producer bad URL", func() error {
			_, err := DecodeProducerParameters(json.RawMessage(`{"predictionServerURLs":["a:1"],"trainingServerURL":"http://b"}`))
			return err
		}, "parameters.predictionServerURLs[0]"},
		{"producer quantile", func() error {
			_, err := DecodeProducerParameters(json.RawMessage(`{"inProcess":{"quantile":1.5}}`))
			return err
		}, "parameters.inProcess.quantile"},
		{"scorer strategy", func() error {
			_, err := scorerFactory("", json.RawMessage(`{"headroomSelectionStrategy":"some"}`), nil)
			return err
		}, "parameters.headroomSelectionStrategy"},
		{"scorer weight", func() error { _, err := scorerFactory("", json.RawMessage(`{"ttftWeight":-1}`), nil); return err }, "parameters.ttftWeight"},
		{"affinity threshold", func() error {
			_, err := NewAffinityFilter("", AffinityFilterParameters{AffinityThreshold: 2}, 0)
			return err
		}, "parameters.affinityThreshold"},
		{"affinity exploration", func() error {
			_, err := NewAffinityFilter("", AffinityFilterParameters{ExplorationProbability: -0.1}, 0)
			return err
		}, "parameters.explorationProbability"},
		{"tier epsilon", func() error {
			_, err := tierFilterFactory("", json.RawMessage(`{"epsilonExploreNeg":2}`), nil)
			return err
		}, "parameters.epsilonExploreNeg"},
		{"admitter takes none", func() error { _, err := admitterFactory("", json.RawMessage(`{"x":1}`), nil); return err }, `"x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.build()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

// TestCalibrationKeepsTheObjective: the per-endpoint factor is the q-quantile of the newest
// CalibrationWindow ratios actual/predicted (so about q of them fall within the calibrated
// prediction), their geometric mean for the mean objective, and 1 below three samples.
func TestCalibrationKeepsTheObjective(t *testing.T) {
	var r logRatios
	r.add(50, 100)
	r.add(50, 100)
	if f := r.factor(0.9); f != 1 {
		t.Errorf("two samples: factor %v, want 1", f)
	}
	r = logRatios{}
	// Ratios 0.5, 0.55, …, 1.45 (20 values): the 0.9-quantile interpolates the 18th and 19th
	// smallest (1.35, 1.4) at 0.1 of the way: ln-space, so exp(ln 1.35 + 0.1·(ln 1.4 − ln 1.35)).
	for i := 19; i >= 0; i-- {
		r.add(0.5+0.05*float64(i), 1)
	}
	want := math.Exp(math.Log(1.35) + 0.1*(math.Log(1.4)-math.Log(1.35)))
	if f := r.factor(0.9); math.Abs(f-want) > 1e-9 {
		t.Errorf("q=0.9: factor %v, want %v", f, want)
	}
	covered := 0
	for i := 0; i < 20; i++ {
		if 0.5+0.05*float64(i) <= r.factor(0.9) {
			covered++
		}
	}
	if covered != 18 {
		t.Errorf("%d of 20 ratios within the 0.9 factor, want 18", covered)
	}
	var logSum float64
	for i := 0; i < 20; i++ {
		logSum += math.Log(0.5 + 0.05*float64(i))
	}
	if f, want := r.factor(0), math.Exp(logSum/20); math.Abs(f-want) > 1e-9 {
		t.Errorf("mean objective: factor %v, want the geometric mean %v", f, want)
	}
	// The window keeps the newest 20: 20 more ratios of 2 replace every older one.
	for i := 0; i < CalibrationWindow; i++ {
		r.add(2, 1)
	}
	if f := r.factor(0.9); math.Abs(f-2) > 1e-9 {
		t.Errorf("after 20 ratios of 2: factor %v, want 2", f)
	}
	r.add(0, 1) // not a measurement: ignored
	r.add(1, 0)
	if r.n != CalibrationWindow || math.Abs(r.factor(0.5)-2) > 1e-9 {
		t.Errorf("zero values changed the window: n %d, factor %v", r.n, r.factor(0.5))
	}
	for _, tc := range []struct {
		p    InProcessParameters
		want float64
	}{{InProcessParameters{}, 0.9}, {InProcessParameters{Quantile: 0.75}, 0.75}, {InProcessParameters{Objective: "mean", Quantile: 0.75}, 0}} {
		if got := calibrationQuantile(tc.p); got != tc.want {
			t.Errorf("calibrationQuantile(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}
