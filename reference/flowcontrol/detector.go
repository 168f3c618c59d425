// Package flowcontrol is the reference EPP's flow control (SPEC §10; docs/request-surface.md
// §6), modelled on llm-d-router v0.10.0 pkg/epp/flowcontrol with its configuration names and
// defaults (framework.FlowControlConfig): requests wait in priority bands while the pool is
// saturated, the highest band is dispatched first, a full band refuses at once, a request that
// waits past its TTL or whose client goes away leaves its queue, and every refusal names its
// x-llm-d-request-dropped-reason (framework.Dropped).
//
// This file holds the saturation detectors, upstream's plugin types utilization-detector and
// concurrency-detector (pkg/epp/framework/plugins/flowcontrol/saturationdetector/{utilization,
// concurrency}); controller.go the controller.
package flowcontrol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/eppkit/eppkit/reference/framework"
)

// Plugin types (upstream names).
const (
	UtilizationDetectorType = "utilization-detector"
	ConcurrencyDetectorType = "concurrency-detector"
	// DefaultMaxConcurrency is concurrency-detector's maxConcurrency default.
	DefaultMaxConcurrency = 100
)

// Pool is what a detector reads: the pool's endpoints with their latest metrics, the time, and
// the requests flow control dispatched that are still in flight.
type Pool interface {
	// Len is the number of ready endpoints.
	Len() int
	// Metrics returns endpoint i's latest metrics, nil when never scraped.
	Metrics(i int) *framework.Metrics
}

// SaturationDetector returns the pool's saturation: ≥ 1.0 is saturated (nothing is dispatched;
// upstream's static usage-limit policy gives every band the ceiling 1.0). An empty pool is 1.0.
type SaturationDetector interface {
	framework.Plugin
	Saturation(pool Pool, now time.Time, inFlight int64) float64
}

// UtilizationDetector is utilization-detector: each endpoint scores max(waiting /
// queueDepthThreshold, kvCacheUsage / kvCacheUtilThreshold), or 1.0 when its metrics are missing,
// failed or older than metricsStalenessThreshold (fail closed); the pool's saturation is the
// average (upstream detector.go Saturation).
type UtilizationDetector struct {
	typed framework.TypedName
	// QueueDepthThreshold, KVCacheUtilThreshold and MetricsStalenessThreshold are the thresholds
	// (defaults 5, 0.8, 200ms, as upstream).
	QueueDepthThreshold       int
	KVCacheUtilThreshold      float64
	MetricsStalenessThreshold time.Duration
}

// utilizationParams are utilization-detector's parameters (upstream field names; headroom is its
// filter role's, accepted and unused).
type utilizationParams struct {
	QueueDepthThreshold       *int                `json:"queueDepthThreshold,omitempty"`
	KVCacheUtilThreshold      *float64            `json:"kvCacheUtilThreshold,omitempty"`
	MetricsStalenessThreshold *framework.Duration `json:"metricsStalenessThreshold,omitempty"`
	Headroom                  *float64            `json:"headroom,omitempty"`
}

// NewUtilizationDetector returns a utilization-detector named name with the given thresholds
// (0 = the default).
func NewUtilizationDetector(name string, queueDepth int, kvUtil float64, staleness time.Duration) *UtilizationDetector {
	if name == "" {
		name = UtilizationDetectorType
	}
	if queueDepth <= 0 {
		queueDepth = framework.DefaultQueueDepthThreshold
	}
	if kvUtil <= 0 {
		kvUtil = framework.DefaultKVCacheUtilThreshold
	}
	if staleness <= 0 {
		staleness = framework.DefaultMetricsStalenessThreshold
	}
	return &UtilizationDetector{typed: framework.TypedName{Type: UtilizationDetectorType, Name: name},
		QueueDepthThreshold: queueDepth, KVCacheUtilThreshold: kvUtil, MetricsStalenessThreshold: staleness}
}

// TypedName returns the plugin's type and name.
func (d *UtilizationDetector) TypedName() framework.TypedName { return d.typed }

// Saturation is the average endpoint score (see UtilizationDetector).
func (d *UtilizationDetector) Saturation(pool Pool, now time.Time, _ int64) float64 {
	n := pool.Len()
	if n == 0 {
		return 1
	}
	total := 0.0
	for i := 0; i < n; i++ {
		m := pool.Metrics(i)
		if m == nil || m.UpdateTime.IsZero() || m.ScrapeError != nil || now.Sub(m.UpdateTime) > d.MetricsStalenessThreshold {
			total++
			continue
		}
		total += max(float64(m.WaitingQueueSize)/float64(d.QueueDepthThreshold), m.KVCacheUsage/d.KVCacheUtilThreshold)
	}
	return total / float64(n)
}

// ConcurrencyDetector is concurrency-detector in its default mode, requests: the pool's
// saturation is the requests flow control dispatched that are still in flight over
// maxConcurrency × the number of endpoints (upstream concurrency/detector.go Saturation).
type ConcurrencyDetector struct {
	typed framework.TypedName
	// MaxConcurrency is the in-flight requests one endpoint takes (default 100).
	MaxConcurrency int64
}

// concurrencyParams are concurrency-detector's parameters (upstream names). Only the requests
// mode exists in the reference; maxTokenConcurrency, headroom and inFlightLoadProducerName are
// accepted and unused.
type concurrencyParams struct {
	MaxConcurrency           *int64   `json:"maxConcurrency,omitempty"`
	Headroom                 *float64 `json:"headroom,omitempty"`
	ConcurrencyMode          *string  `json:"concurrencyMode,omitempty"`
	MaxTokenConcurrency      *int64   `json:"maxTokenConcurrency,omitempty"`
	InFlightLoadProducerName string   `json:"inFlightLoadProducerName,omitempty"`
}

// TypedName returns the plugin's type and name.
func (d *ConcurrencyDetector) TypedName() framework.TypedName { return d.typed }

// Saturation is inFlight / (MaxConcurrency × endpoints); an empty pool is 1.0.
func (d *ConcurrencyDetector) Saturation(pool Pool, _ time.Time, inFlight int64) float64 {
	n := int64(pool.Len())
	if n == 0 || d.MaxConcurrency <= 0 {
		return 1
	}
	return float64(inFlight) / float64(d.MaxConcurrency*n)
}

// Register adds utilization-detector and concurrency-detector to reg. Parameters are decoded
// strictly; an out-of-range value is an error naming it.
func Register(reg *framework.Registry) error {
	if err := reg.Register(UtilizationDetectorType, func(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		var p utilizationParams
		if err := framework.DecodeParameters(raw, &p); err != nil {
			return nil, err
		}
		d := NewUtilizationDetector(name, 0, 0, 0)
		if p.QueueDepthThreshold != nil {
			if *p.QueueDepthThreshold <= 0 {
				return nil, fmt.Errorf("parameters.queueDepthThreshold: must be > 0, got %d", *p.QueueDepthThreshold)
			}
			d.QueueDepthThreshold = *p.QueueDepthThreshold
		}
		if p.KVCacheUtilThreshold != nil {
			if v := *p.KVCacheUtilThreshold; v <= 0 || v > 1 {
				return nil, fmt.Errorf("parameters.kvCacheUtilThreshold: must be in (0,1], got %v", v)
			}
			d.KVCacheUtilThreshold = *p.KVCacheUtilThreshold
		}
		if p.MetricsStalenessThreshold != nil {
			if p.MetricsStalenessThreshold.Duration <= 0 {
				return nil, fmt.Errorf("parameters.metricsStalenessThreshold: must be > 0, got %s", p.MetricsStalenessThreshold)
			}
			d.MetricsStalenessThreshold = p.MetricsStalenessThreshold.Duration
		}
		if p.Headroom != nil && *p.Headroom < 0 {
			return nil, fmt.Errorf("parameters.headroom: must be ≥ 0, got %v", *p.Headroom)
		}
		return d, nil
	}); err != nil {
		return err
	}
	return reg.Register(ConcurrencyDetectorType, func(name string, raw json.RawMessage, _ framework.Handle) (framework.Plugin, error) {
		var p concurrencyParams
		if err := framework.DecodeParameters(raw, &p); err != nil {
			return nil, err
		}
		if name == "" {
			name = ConcurrencyDetectorType
		}
		d := &ConcurrencyDetector{typed: framework.TypedName{Type: ConcurrencyDetectorType, Name: name}, MaxConcurrency: DefaultMaxConcurrency}
		if p.MaxConcurrency != nil {
			if *p.MaxConcurrency <= 0 {
				return nil, fmt.Errorf("parameters.maxConcurrency: must be > 0, got %d", *p.MaxConcurrency)
			}
			d.MaxConcurrency = *p.MaxConcurrency
		}
		if p.ConcurrencyMode != nil && *p.ConcurrencyMode != "requests" {
			return nil, fmt.Errorf("parameters.concurrencyMode: %q is not implemented by the reference (only \"requests\")", *p.ConcurrencyMode)
		}
		if p.Headroom != nil && *p.Headroom < 0 {
			return nil, fmt.Errorf("parameters.headroom: must be ≥ 0, got %v", *p.Headroom)
		}
		return d, nil
	})
}
