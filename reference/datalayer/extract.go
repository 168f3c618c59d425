package datalayer

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/eppkit/eppkit/reference/framework"
)

// extract turns parsed metric families into Metrics. It fills every field it can read and returns
// the joined errors of the rest: a required family (queue, running, KV) that is missing, has no
// matching series or a value that is not a finite non-negative number; an info label that is not
// an integer. Absent optional families (LoRA info, cache config) are not errors.
// UpdateTime and ScrapeError are left for the caller.
func extract(fams map[string]*dto.MetricFamily, sp specs) (*framework.Metrics, error) {
	m := &framework.Metrics{}
	var errs []error

	if sp.waiting != nil {
		if v, err := loadValue(fams, sp.waiting, sp.engineLabel, false); err != nil {
			errs = append(errs, err)
		} else {
			m.WaitingQueueSize = int(math.Round(v))
		}
	}
	if sp.running != nil {
		if v, err := loadValue(fams, sp.running, sp.engineLabel, false); err != nil {
			errs = append(errs, err)
		} else {
			m.RunningRequests = int(math.Round(v))
		}
	}
	if sp.kv != nil {
		kv := sp.kv
		if fams[kv.name] == nil && sp.kvFallback != nil && fams[sp.kvFallback.name] != nil {
			kv = sp.kvFallback
		}
		if v, err := loadValue(fams, kv, sp.engineLabel, true); err != nil {
			errs = append(errs, err)
		} else {
			// vLLM reports a fraction; a value a hair above 1 from float arithmetic is clamped.
			m.KVCacheUsage = min(v, 1)
		}
	}
	if sp.lora != nil {
		if err := extractLoRA(fams, sp.lora, m); err != nil {
			errs = append(errs, err)
		}
	}
	if sp.cache != nil {
		if err := extractCacheConfig(fams, sp.cache, m); err != nil {
			errs = append(errs, err)
		}
	}
	return m, errors.Join(errs...)
}

// matching returns the series of spec's family that carry all of spec's labels; the family is
// nil when the exposition lacks it.
func matching(fams map[string]*dto.MetricFamily, spec *metricSpec) (*dto.MetricFamily, []*dto.Metric) {
	fam := fams[spec.name]
	if fam == nil {
		return nil, nil
	}
	var out []*dto.Metric
	for _, s := range fam.GetMetric() {
		if hasLabels(s, spec.labels) {
			out = append(out, s)
		}
	}
	return fam, out
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		got, ok := label(s, k)
		if !ok || got != v {
			return false
		}
	}
	return true
}

func label(s *dto.Metric, name string) (string, bool) {
	for _, lp := range s.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

// sampleValue reads a gauge, counter or untyped sample (upstream extractValue reads gauges and
// counters; the text format without a TYPE line yields untyped).
func sampleValue(fam *dto.MetricFamily, s *dto.Metric) (float64, error) {
	switch {
	case s.GetGauge() != nil:
		return s.GetGauge().GetValue(), nil
	case s.GetCounter() != nil:
		return s.GetCounter().GetValue(), nil
	case s.GetUntyped() != nil:
		return s.GetUntyped().GetValue(), nil
	}
	return 0, fmt.Errorf("metric %q is a %s, want a gauge, counter or untyped value", fam.GetName(), strings.ToLower(fam.GetType().String()))
}

// loadValue reads one required load metric. Series carrying the engine label are data-parallel
// engines of the same server: their values are summed (average=false) or averaged (average=true),
// and series without the label are then ignored. Without engine series, the series with the
// latest timestamp wins and the first one on a tie, as upstream's Spec.getLatestMetric does
// (pkg/epp/framework/plugins/datalayer/extractor/metrics/spec.go).
func loadValue(fams map[string]*dto.MetricFamily, spec *metricSpec, engineLabel string, average bool) (float64, error) {
	fam, series := matching(fams, spec)
	if fam == nil {
		return 0, fmt.Errorf("metric family %q not found", spec.name)
	}
	if len(series) == 0 {
		return 0, fmt.Errorf("metric %q has no series with labels %v", spec.name, spec.labels)
	}
	var engines []*dto.Metric
	for _, s := range series {
		if _, ok := label(s, engineLabel); ok {
			engines = append(engines, s)
		}
	}
	pick := func(s *dto.Metric) (float64, error) {
		v, err := sampleValue(fam, s)
		if err != nil {
			return 0, err
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, fmt.Errorf("metric %q has value %v, want a finite number >= 0", spec.name, v)
		}
		return v, nil
	}
	if len(engines) > 0 {
		sum := 0.0
		for _, s := range engines {
			v, err := pick(s)
			if err != nil {
				return 0, err
			}
			sum += v
		}
		if average {
			return sum / float64(len(engines)), nil
		}
		return sum, nil
	}
	latest := series[0]
	for _, s := range series[1:] {
		if s.GetTimestampMs() > latest.GetTimestampMs() {
			latest = s
		}
	}
	return pick(latest)
}

// extractLoRA reads the LoRA info family: the series with the largest value (vLLM sets it to the
// time the adapter lists last changed, so it is the newest) gives the running and waiting
// adapter lists and max_lora (upstream LoRASpec.getLatestMetric in
// pkg/epp/framework/plugins/datalayer/extractor/metrics/loraspec.go; ties keep the first).
// An adapter listed in both lists counts as running only.
func extractLoRA(fams map[string]*dto.MetricFamily, spec *metricSpec, m *framework.Metrics) error {
	fam, series := matching(fams, spec)
	if len(series) == 0 {
		return nil // optional: a server without LoRA support exports no such family
	}
	var latest *dto.Metric
	best := math.Inf(-1)
	for _, s := range series {
		v, err := sampleValue(fam, s)
		if err != nil {
			return err
		}
		if !math.IsNaN(v) && v > best {
			best, latest = v, s
		}
	}
	if latest == nil {
		return fmt.Errorf("metric %q: every series has a NaN value", spec.name)
	}
	running, _ := label(latest, LabelRunningAdapters)
	waiting, _ := label(latest, LabelWaitingAdapters)
	m.ActiveModels = adapterSet(running)
	m.WaitingModels = adapterSet(waiting)
	for a := range m.ActiveModels {
		delete(m.WaitingModels, a)
	}
	if s, ok := label(latest, LabelMaxLoRA); ok && s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("metric %q: label %s=%q is not a non-negative integer", spec.name, LabelMaxLoRA, s)
		}
		m.MaxActiveModels = n
	}
	return nil
}

// adapterSet splits a comma list, dropping blanks.
func adapterSet(csv string) map[string]struct{} {
	out := map[string]struct{}{}
	for name := range strings.SplitSeq(csv, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = struct{}{}
		}
	}
	return out
}

// extractCacheConfig reads block_size and num_gpu_blocks from the cache-config info family
// (upstream populateCacheInfoMetrics in .../extractor/metrics/extractor.go): the series with the
// latest timestamp, the first on a tie. A missing label leaves its field 0.
func extractCacheConfig(fams map[string]*dto.MetricFamily, spec *metricSpec, m *framework.Metrics) error {
	_, series := matching(fams, spec)
	if len(series) == 0 {
		return nil // optional
	}
	latest := series[0]
	for _, s := range series[1:] {
		if s.GetTimestampMs() > latest.GetTimestampMs() {
			latest = s
		}
	}
	var errs []error
	for _, f := range []struct {
		label string
		dst   *int
	}{{LabelBlockSize, &m.CacheBlockSize}, {LabelNumGPUBlocks, &m.CacheNumGPUBlocks}} {
		s, ok := label(latest, f.label)
		if !ok || s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("metric %q: label %s=%q is not a non-negative integer", spec.name, f.label, s))
			continue
		}
		*f.dst = n
	}
	return errors.Join(errs...)
}
