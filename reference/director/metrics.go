package director

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/plugins/legacyprefix"
	"github.com/eppkit/eppkit/reference/plugins/prefix"
)

// Metric names of the reference EPP (SPEC §5.4). All are prefixed eppkit_epp_.
const (
	MetricSchedulingDuration     = "eppkit_epp_scheduling_duration_seconds"
	MetricPluginDuration         = "eppkit_epp_plugin_duration_seconds"
	MetricRequests               = "eppkit_epp_requests_total"
	MetricPrefixIndexSize        = "eppkit_epp_prefix_index_size"
	MetricPrefixMatchedBlocks    = "eppkit_epp_prefix_matched_blocks_total"
	MetricPrefixRequestBlocks    = "eppkit_epp_prefix_request_blocks_total"
	MetricPrefixHitRatio         = "eppkit_epp_prefix_hit_ratio"
	MetricPoolAverageQueue       = "eppkit_epp_pool_average_queue_size"
	MetricPoolAverageKVCache     = "eppkit_epp_pool_average_kv_cache_utilization"
	MetricPoolReadyEndpoints     = "eppkit_epp_pool_ready_endpoints"
	MetricPrepareDataTimeouts    = "eppkit_epp_prepare_data_timeouts_total"
	MetricPrepareDataErrors      = "eppkit_epp_prepare_data_errors_total"
	MetricPrepareDataBadRequests = "eppkit_epp_prepare_data_bad_requests_total"
	// Flow control (docs/request-surface.md §6), after llm-d-router v0.10.0's
	// llm_d_epp_flow_control_queue_size and llm_d_epp_flow_control_request_queue_duration_seconds.
	MetricFlowControlQueueSize     = "eppkit_epp_flow_control_queue_size"
	MetricFlowControlQueueDuration = "eppkit_epp_flow_control_request_queue_duration_seconds"
)

// Observer records the request-flow metrics the director produces as requests pass (scheduling
// latency, requests by result code, prefix matches of the pick). Build it with NewObserver and
// pass it in Options.Observer; a nil *Observer records nothing.
type Observer struct {
	scheduling     prometheus.Histogram
	pluginDuration *prometheus.HistogramVec
	requests       *prometheus.CounterVec
	prefixMatched  prometheus.Counter
	prefixTotal    prometheus.Counter
	fcQueue        *prometheus.GaugeVec
	fcWait         *prometheus.HistogramVec
}

// NewObserver creates the event metrics and registers them in reg:
//
//	eppkit_epp_scheduling_duration_seconds      histogram: PrepareData+Admission+Scheduling per request (s)
//	eppkit_epp_plugin_duration_seconds          histogram {plugin, extension_point} (s), fed by ObservePlugin
//	eppkit_epp_requests_total                   counter {code}: HandleRequest outcomes by HTTP status, or "cancelled" (client gone)
//	eppkit_epp_prefix_matched_blocks_total      counter: prefix blocks the pick already held
//	eppkit_epp_prefix_request_blocks_total      counter: prefix blocks hashed for scheduled requests
//	eppkit_epp_flow_control_queue_size          gauge {priority}: requests waiting in flow control
//	eppkit_epp_flow_control_request_queue_duration_seconds  histogram {priority, outcome}: time in flow control (s)
//
// It returns the registration error (for example a duplicate registration).
func NewObserver(reg prometheus.Registerer) (*Observer, error) {
	o := &Observer{
		scheduling: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricSchedulingDuration,
			Help:    "Time from request arrival at the director to the scheduling result (PrepareData, Admission, Scheduling), in seconds.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		pluginDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricPluginDuration,
			Help:    "Time one plugin spent in one extension point for one request, in seconds.",
			Buckets: []float64{0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5},
		}, []string{"plugin", "extension_point"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests,
			Help: "Requests handled by the director, by HTTP status of the outcome (200 = scheduled), or cancelled when the client went away.",
		}, []string{"code"}),
		prefixMatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPrefixMatchedBlocks,
			Help: "Prefix-cache blocks of scheduled requests that the picked endpoint already held (approx-prefix-cache-producer).",
		}),
		prefixTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricPrefixRequestBlocks,
			Help: "Prefix-cache blocks hashed for scheduled requests (approx-prefix-cache-producer).",
		}),
		fcQueue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricFlowControlQueueSize,
			Help: "Requests waiting in flow control's queues, by priority band.",
		}, []string{"priority"}),
		fcWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricFlowControlQueueDuration,
			Help:    "Time a request spent in flow control, by priority and outcome (Dispatched, RejectedCapacity, RejectedNoEndpoints, RejectedOther, EvictedTTL, EvictedContextCancelled), in seconds.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60},
		}, []string{"priority", "outcome"}),
	}
	for _, c := range []prometheus.Collector{o.scheduling, o.pluginDuration, o.requests, o.prefixMatched, o.prefixTotal, o.fcQueue, o.fcWait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricPrefixHitRatio,
		Help: "Matched / hashed prefix blocks over all scheduled requests since start, in [0,1] (0 before any block).",
	}, o.hitRatio)); err != nil {
		return nil, err
	}
	return o, nil
}

// ObservePlugin records one plugin call; it has the shape of framework.RuntimeOptions.ObservePlugin.
func (o *Observer) ObservePlugin(tn framework.TypedName, extensionPoint string, d time.Duration) {
	if o == nil {
		return
	}
	o.pluginDuration.WithLabelValues(tn.String(), extensionPoint).Observe(d.Seconds())
}

// QueueSize adds delta to the flow-control queue size of priority (flowcontrol.Observer).
func (o *Observer) QueueSize(priority int, delta int) {
	if o == nil {
		return
	}
	o.fcQueue.WithLabelValues(strconv.Itoa(priority)).Add(float64(delta))
}

// QueueWait records a request's time in flow control and its outcome (flowcontrol.Observer).
func (o *Observer) QueueWait(priority int, outcome string, d time.Duration) {
	if o == nil {
		return
	}
	o.fcWait.WithLabelValues(strconv.Itoa(priority), outcome).Observe(d.Seconds())
}

func (o *Observer) observeScheduling(d time.Duration) { o.scheduling.Observe(d.Seconds()) }

func (o *Observer) observeRequest(status int) {
	o.requests.WithLabelValues(strconv.Itoa(status)).Inc()
}

func (o *Observer) observeRequestCode(code string) { o.requests.WithLabelValues(code).Inc() }

func (o *Observer) observePrefix(pick *framework.Endpoint) {
	info, ok := framework.AttributeAs[*prefix.PrefixCacheMatchInfo](pick, prefix.PrefixCacheMatchInfoKey)
	if !ok || info == nil || info.TotalBlocks == 0 {
		return
	}
	o.prefixMatched.Add(float64(info.MatchBlocks))
	o.prefixTotal.Add(float64(info.TotalBlocks))
}

func (o *Observer) hitRatio() float64 {
	total := counterValue(o.prefixTotal)
	if total == 0 {
		return 0
	}
	return counterValue(o.prefixMatched) / total
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}

// RegisterPoolCollectors registers the metrics read from the director's sources and runtime at
// scrape time:
//
//	eppkit_epp_pool_ready_endpoints                 gauge: ready endpoints of the pool
//	eppkit_epp_pool_average_queue_size              gauge: mean waiting queue over endpoints with metrics (requests)
//	eppkit_epp_pool_average_kv_cache_utilization    gauge: mean KV-cache use over endpoints with metrics, [0,1]
//	eppkit_epp_prefix_index_size                    gauge {plugin}: entries of each prefix index
//	eppkit_epp_prepare_data_timeouts_total          counter {plugin}: Runtime.PrepareDataStats().Timeouts
//	eppkit_epp_prepare_data_errors_total            counter {plugin}: Runtime.PrepareDataStats().Errors
//	eppkit_epp_prepare_data_bad_requests_total      counter {plugin}: Runtime.PrepareDataStats().BadRequests
func (d *Director) RegisterPoolCollectors(reg prometheus.Registerer) error {
	return reg.Register(&poolCollector{d: d})
}

var (
	descReady        = prometheus.NewDesc(MetricPoolReadyEndpoints, "Ready endpoints of the pool.", nil, nil)
	descAvgQueue     = prometheus.NewDesc(MetricPoolAverageQueue, "Mean waiting queue over the pool's endpoints with metrics (requests).", nil, nil)
	descAvgKV        = prometheus.NewDesc(MetricPoolAverageKVCache, "Mean KV-cache utilization over the pool's endpoints with metrics, in [0,1].", nil, nil)
	descIndexSize    = prometheus.NewDesc(MetricPrefixIndexSize, "Entries in a prefix-cache index (block hashes held across endpoints).", []string{"plugin"}, nil)
	descPrepTimeouts = prometheus.NewDesc(MetricPrepareDataTimeouts, "PrepareData plugins still running when the phase budget ran out.", []string{"plugin"}, nil)
	descPrepErrors   = prometheus.NewDesc(MetricPrepareDataErrors, "PrepareData plugin errors that failed open (panics included).", []string{"plugin"}, nil)
	descPrepBad      = prometheus.NewDesc(MetricPrepareDataBadRequests, "PrepareData plugin errors wrapping ErrBadRequest (the request got 400).", []string{"plugin"}, nil)
)

type poolCollector struct{ d *Director }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range []*prometheus.Desc{descReady, descAvgQueue, descAvgKV, descIndexSize, descPrepTimeouts, descPrepErrors, descPrepBad} {
		ch <- desc
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	mds := c.d.src.Endpoints()
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, float64(len(mds)))
	var n, queue, kv float64
	if c.d.metrics != nil {
		for _, md := range mds {
			m := c.d.metrics.Metrics(md.Key())
			if m == nil || m.UpdateTime.IsZero() {
				continue
			}
			n++
			queue += float64(m.WaitingQueueSize)
			kv += m.KVCacheUsage
		}
	}
	if n > 0 {
		queue, kv = queue/n, kv/n
	}
	ch <- prometheus.MustNewConstMetric(descAvgQueue, prometheus.GaugeValue, queue)
	ch <- prometheus.MustNewConstMetric(descAvgKV, prometheus.GaugeValue, kv)
	for _, p := range c.d.rt.Plugins() {
		switch ip := p.(type) {
		case *prefix.Producer:
			ch <- prometheus.MustNewConstMetric(descIndexSize, prometheus.GaugeValue, float64(ip.Index().Size()), p.TypedName().String())
		case *legacyprefix.Plugin:
			ch <- prometheus.MustNewConstMetric(descIndexSize, prometheus.GaugeValue, float64(ip.IndexSize()), p.TypedName().String())
		}
	}
	st := c.d.rt.PrepareDataStats()
	for desc, counts := range map[*prometheus.Desc]map[framework.TypedName]int64{
		descPrepTimeouts: st.Timeouts, descPrepErrors: st.Errors, descPrepBad: st.BadRequests,
	} {
		for tn, v := range counts {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), tn.String())
		}
	}
}
