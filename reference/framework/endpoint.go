package framework

import (
	"maps"
	"net"
	"strconv"
	"time"
)

// EndpointMetadata identifies one model-server endpoint of the pool: a pod (or one data-parallel
// rank of a pod) at Address:Port.
type EndpointMetadata struct {
	// Namespace and Name of the endpoint. From an InferencePool, Name is "<pod>-rank-<i>" for
	// target port i, rank 0 included (upstream v1.5.0 pkg/epp/datastore/datastore.go); a static
	// endpoint is named by its "ip:port".
	Namespace string
	Name      string
	// PodName is the pod's name without a rank suffix.
	PodName string
	// Address is the pod IP (IPv4 or IPv6, no brackets).
	Address string
	// Port is the model server's port for this endpoint.
	Port int
	// Labels are the pod's labels.
	Labels map[string]string
}

// Key returns "ip:port" (IPv6 in brackets), the endpoint's identity everywhere in the framework:
// score maps, prefix indexes and the pick returned to the gateway all use it.
func (m *EndpointMetadata) Key() string {
	return net.JoinHostPort(m.Address, strconv.Itoa(m.Port))
}

// Metrics is what the data layer last scraped from an endpoint.
type Metrics struct {
	// WaitingQueueSize is vllm:num_requests_waiting (requests).
	WaitingQueueSize int
	// RunningRequests is vllm:num_requests_running (requests).
	RunningRequests int
	// KVCacheUsage is vllm:kv_cache_usage_perc, a fraction in [0,1].
	KVCacheUsage float64
	// ActiveModels are the LoRA adapters running (vllm:lora_requests_info running_lora_adapters).
	ActiveModels map[string]struct{}
	// WaitingModels are the LoRA adapters waiting (vllm:lora_requests_info waiting_lora_adapters).
	WaitingModels map[string]struct{}
	// MaxActiveModels is max_lora: how many adapters may run at once (0 = unknown).
	MaxActiveModels int
	// CacheBlockSize is vllm:cache_config_info{block_size} in tokens (0 = not reported).
	CacheBlockSize int
	// CacheNumGPUBlocks is vllm:cache_config_info{num_gpu_blocks} (0 = not reported).
	CacheNumGPUBlocks int
	// UpdateTime is when these metrics were scraped; the zero time means never.
	UpdateTime time.Time
	// ScrapeError is the last scrape's error, nil when it succeeded.
	ScrapeError error
}

// Clone returns a deep copy.
func (m *Metrics) Clone() *Metrics {
	if m == nil {
		return nil
	}
	c := *m
	c.ActiveModels = maps.Clone(m.ActiveModels)
	c.WaitingModels = maps.Clone(m.WaitingModels)
	return &c
}

// Endpoint is one candidate endpoint as a request sees it: the endpoint's metadata, a snapshot
// of its metrics taken when the request arrived, and the request's attributes (data keys written
// by PrepareData producers). An Endpoint belongs to one request; it is not shared between requests.
//
// Put and Get are not synchronised: the PrepareData executor gives each concurrently running
// plugin its own staged view (see NewStagedView), and scheduling runs on one goroutine.
type Endpoint struct {
	Metadata *EndpointMetadata
	Metrics  *Metrics

	attrs  map[string]any
	staged map[string]any // non-nil only on a staged view
}

// NewEndpoint returns a request-scoped snapshot of an endpoint. metrics may be nil (never scraped);
// it is replaced by an empty Metrics.
func NewEndpoint(md *EndpointMetadata, metrics *Metrics) *Endpoint {
	if metrics == nil {
		metrics = &Metrics{}
	}
	return &Endpoint{Metadata: md, Metrics: metrics, attrs: map[string]any{}}
}

// Key returns Metadata.Key().
func (e *Endpoint) Key() string { return e.Metadata.Key() }

// Get returns the attribute stored under a data key.
func (e *Endpoint) Get(key string) (any, bool) {
	if e.staged != nil {
		if v, ok := e.staged[key]; ok {
			return v, true
		}
	}
	v, ok := e.attrs[key]
	return v, ok
}

// Put stores an attribute under a data key. On a staged view the value is held until the
// executor commits it.
func (e *Endpoint) Put(key string, value any) {
	if e.staged != nil {
		e.staged[key] = value
		return
	}
	e.attrs[key] = value
}

// Keys returns the data keys present on the endpoint, staged ones included.
func (e *Endpoint) Keys() []string {
	out := make([]string, 0, len(e.attrs)+len(e.staged))
	for k := range e.attrs {
		out = append(out, k)
	}
	for k := range e.staged {
		if _, dup := e.attrs[k]; !dup {
			out = append(out, k)
		}
	}
	return out
}

// NewStagedView returns a view of e for one PrepareData plugin: Get sees a copy of e's attributes
// as they are now plus what the view itself wrote; Put writes only into the view. Commit copies
// the view's writes into e. A view that is never committed leaves e untouched, and the plugin may
// keep writing into it after the executor has given up on it without racing the executor.
func (e *Endpoint) NewStagedView() *Endpoint {
	return &Endpoint{Metadata: e.Metadata, Metrics: e.Metrics, attrs: maps.Clone(e.attrs), staged: map[string]any{}}
}

// CommitStaged copies the writes of a staged view (made by e.NewStagedView) into e.
// The caller must make sure the view's plugin has returned.
func (e *Endpoint) CommitStaged(view *Endpoint) {
	for k, v := range view.staged {
		e.attrs[k] = v
	}
}

// AttributeAs reads a data key and asserts its type; ok is false when the key is absent or holds
// another type. Consumers use it so that a missing or mistyped attribute degrades, never panics.
func AttributeAs[T any](e *Endpoint, key string) (T, bool) {
	var zero T
	v, ok := e.Get(key)
	if !ok {
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		return zero, false
	}
	return t, true
}
