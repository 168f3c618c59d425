package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/eppkit/eppkit/bench"
	"github.com/eppkit/eppkit/internal/percentile"
)

// PredictingFlight is a Flight that knows the TTFT its picker predicted for the endpoint it
// picked (the reference's predicted-latency-producer, read back by bench/simepp). The
// simulation then compares every prediction with the TTFT the request got (Result.Predictions):
// the "predictions vs outcomes per endpoint" of a predicted-latency investigation.
type PredictingFlight interface {
	Flight
	// PredictedTTFTMs is the predicted TTFT (ms) of the picked endpoint, ok false when the
	// picker had no prediction (predictor not ready, another profile ran).
	PredictedTTFTMs() (ms float64, ok bool)
}

// PredictionRow compares predictions with outcomes on one endpoint, over the requests routed
// there with a prediction that completed. Times in ms.
type PredictionRow struct {
	Endpoint string `json:"endpoint"`
	Profile  string `json:"profile,omitempty"`
	// Predicted is how many such requests there were.
	Predicted int `json:"predicted"`
	// MeanPredictedTTFTMs and MeanTTFTMs are their mean predicted and measured TTFT.
	MeanPredictedTTFTMs float64 `json:"mean_predicted_ttft_ms"`
	MeanTTFTMs          float64 `json:"mean_ttft_ms"`
	// MedianRatio is the median of measured ÷ predicted TTFT (1 = exact; a p90 predictor should
	// sit below 1).
	MedianRatio float64 `json:"median_ratio"`
	// Covered is the share whose measured TTFT was at most the prediction (a p90 quantile
	// predictor that is calibrated covers about 90%).
	Covered float64 `json:"covered"`
	// SLOPredictedMet counts the requests with a TTFT SLO whose prediction met it (positive TTFT
	// headroom at the pick) and SLOMet those of them whose measured TTFT met it too.
	SLOPredictedMet int `json:"slo_predicted_met"`
	SLOMet          int `json:"slo_met"`
}

// predictionRows builds the rows from the outcomes and the predictions (NaN: none), in the order
// of the endpoints.
func predictionRows(eps []Endpoint, outcomes []bench.Outcome, predicted []float64) []PredictionRow {
	type acc struct {
		row    PredictionRow
		ratios []float64
		pSum   float64
		aSum   float64
	}
	by := make(map[string]*acc, len(eps))
	for _, ep := range eps {
		by[ep.Name] = &acc{row: PredictionRow{Endpoint: ep.Name, Profile: ep.Profile}}
	}
	for i, o := range outcomes {
		p := predicted[i]
		a := by[o.Endpoint]
		if math.IsNaN(p) || a == nil || !o.OK() || !(p > 0) {
			continue
		}
		a.row.Predicted++
		a.pSum += p
		a.aSum += o.TTFTMs
		a.ratios = append(a.ratios, o.TTFTMs/p)
		if o.TTFTMs <= p {
			a.row.Covered++
		}
		if o.SLO != nil && o.SLO.TTFTMs > 0 && p <= o.SLO.TTFTMs {
			a.row.SLOPredictedMet++
			if o.TTFTMs <= o.SLO.TTFTMs {
				a.row.SLOMet++
			}
		}
	}
	rows := make([]PredictionRow, 0, len(eps))
	some := false
	for _, ep := range eps {
		a := by[ep.Name]
		if n := float64(a.row.Predicted); n > 0 {
			some = true
			a.row.MeanPredictedTTFTMs, a.row.MeanTTFTMs = a.pSum/n, a.aSum/n
			a.row.MedianRatio = percentile.Of(a.ratios, 50)
			a.row.Covered /= n
		}
		rows = append(rows, a.row)
	}
	if !some {
		return nil
	}
	return rows
}

// PrintPredictions writes the predictions-vs-outcomes table (nothing when the picker made no
// predictions).
func PrintPredictions(w io.Writer, rows []PredictionRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\npredictions vs outcomes at the picked endpoint (requests with a prediction that completed):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "endpoint\tprofile\tpredicted\tmean predicted TTFT (ms)\tmean TTFT (ms)\tmedian TTFT ÷ predicted\tTTFT ≤ predicted\tSLO predicted met\tof them met\t")
	for _, r := range slices.Clone(rows) {
		met := "n/a"
		if r.SLOPredictedMet > 0 {
			met = fmt.Sprintf("%d (%.0f%%)", r.SLOMet, 100*float64(r.SLOMet)/float64(r.SLOPredictedMet))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.2f\t%.0f%%\t%d\t%s\t\n", r.Endpoint, r.Profile, r.Predicted,
			r.MeanPredictedTTFTMs, r.MeanTTFTMs, r.MedianRatio, 100*r.Covered, r.SLOPredictedMet, met)
	}
	_ = tw.Flush()
}
