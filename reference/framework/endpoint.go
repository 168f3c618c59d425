package framework

import (
	"maps"
	"strconv"
	"strings"
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
	// One allocation (the string) instead of net.JoinHostPort + strconv.Itoa's two: Key is on
	// every request's path.
	var buf [64]byte
	b := buf[:0]
	ipv6 := strings.IndexByte(m.Address, ':') >= 0
	if ipv6 {
		b = append(b, '[')
	}
	b = append(b, m.Address...)
	if ipv6 {
		b = append(b, ']')
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(m.Port), 10)
	return string(b)
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
// Metadata and Metrics may be shared with other requests and must be treated as read-only.
//
// Put and Get are not synchronised: the PrepareData executor gives each concurrently running
// plugin its own staged view (see NewStagedView), and scheduling runs on one goroutine.
type Endpoint struct {
	Metadata *EndpointMetadata
	Metrics  *Metrics

	key string // Metadata.Key(), computed once; "" for an Endpoint built without NewEndpoint

	// attrs holds the attributes as a short list (an endpoint carries a handful of data keys, so
	// a linear scan beats a map and costs one allocation). It is copy-on-write once shared:
	// NewStagedView hands the list itself to the view (no copy) and sets shared; the next write
	// to e copies it first, so a view never sees a later write to e.
	attrs  []attr
	shared bool
	view   bool   // a staged view (NewStagedView)
	staged []attr // the view's own writes
}

type attr struct {
	key   string
	value any
}

func findAttr(list []attr, key string) int {
	for i := range list {
		if list[i].key == key {
			return i
		}
	}
	return -1
}

// NewEndpoint returns a request-scoped snapshot of an endpoint. metrics may be nil (never scraped);
// it is replaced by an empty Metrics.
func NewEndpoint(md *EndpointMetadata, metrics *Metrics) *Endpoint {
	return NewEndpointKeyed(md, md.Key(), metrics)
}

// NewEndpointKeyed is NewEndpoint for a caller that already holds md.Key() (key must equal it):
// it saves formatting the key on every request. Added for the reference EPP's request path.
func NewEndpointKeyed(md *EndpointMetadata, key string, metrics *Metrics) *Endpoint {
	if metrics == nil {
		metrics = &Metrics{}
	}
	return &Endpoint{Metadata: md, Metrics: metrics, key: key}
}

// NewEndpoints returns NewEndpointKeyed(mds[i], keys[i], metrics[i]) for every i, allocated
// together (two allocations for the whole pool instead of one per endpoint). keys and metrics
// must be as long as mds; a nil metrics entry is replaced by an empty Metrics. Added for the
// reference EPP's request path, which builds the candidate list on every request.
func NewEndpoints(mds []*EndpointMetadata, keys []string, metrics []*Metrics) []*Endpoint {
	backing := make([]Endpoint, len(mds))
	out := make([]*Endpoint, len(mds))
	var empty *Metrics
	for i, md := range mds {
		m := metrics[i]
		if m == nil {
			if empty == nil {
				empty = &Metrics{}
			}
			m = empty // shared read-only, like every Metrics an Endpoint holds
		}
		backing[i] = Endpoint{Metadata: md, Metrics: m, key: keys[i]}
		out[i] = &backing[i]
	}
	return out
}

// Key returns Metadata.Key().
func (e *Endpoint) Key() string {
	if e.key != "" {
		return e.key
	}
	return e.Metadata.Key()
}

// Get returns the attribute stored under a data key.
func (e *Endpoint) Get(key string) (any, bool) {
	if i := findAttr(e.staged, key); i >= 0 {
		return e.staged[i].value, true
	}
	if i := findAttr(e.attrs, key); i >= 0 {
		return e.attrs[i].value, true
	}
	return nil, false
}

// Put stores an attribute under a data key. On a staged view the value is held until the
// executor commits it.
func (e *Endpoint) Put(key string, value any) {
	if e.view {
		e.staged = putAttr(e.staged, key, value)
		return
	}
	e.unshare(1)
	e.attrs = putAttr(e.attrs, key, value)
}

func putAttr(list []attr, key string, value any) []attr {
	if i := findAttr(list, key); i >= 0 {
		list[i].value = value
		return list
	}
	return append(list, attr{key: key, value: value})
}

// unshare gives e its own copy of attrs, with room for extra more, when a view shares it.
func (e *Endpoint) unshare(extra int) {
	if e.shared {
		e.attrs = append(make([]attr, 0, len(e.attrs)+extra), e.attrs...)
		e.shared = false
	}
}

// Keys returns the data keys present on the endpoint, staged ones included.
func (e *Endpoint) Keys() []string {
	out := make([]string, 0, len(e.attrs)+len(e.staged))
	for _, a := range e.attrs {
		out = append(out, a.key)
	}
	for _, a := range e.staged {
		if findAttr(e.attrs, a.key) < 0 {
			out = append(out, a.key)
		}
	}
	return out
}

// NewStagedView returns a view of e for one PrepareData plugin: Get sees e's attributes as they
// are now plus what the view itself wrote; Put writes only into the view. Commit copies the view's
// writes into e. A view that is never committed leaves e untouched, and the plugin may keep
// writing into it after the executor has given up on it without racing the executor: the view
// shares e's attribute list read-only, and e copies it before its next write.
func (e *Endpoint) NewStagedView() *Endpoint {
	v := &Endpoint{}
	e.stageInto(v)
	return v
}

// stageInto makes v a staged view of e (NewStagedView without the allocation).
func (e *Endpoint) stageInto(v *Endpoint) {
	if len(e.attrs) > 0 {
		e.shared = true
	}
	// The view's list is capped at its length, so nothing the view does can write into it.
	*v = Endpoint{Metadata: e.Metadata, Metrics: e.Metrics, key: e.key, attrs: e.attrs[:len(e.attrs):len(e.attrs)], view: true}
}

// CommitStaged copies the writes of a staged view (made by e.NewStagedView) into e.
// The caller must make sure the view's plugin has returned.
func (e *Endpoint) CommitStaged(view *Endpoint) {
	if len(view.staged) == 0 {
		return
	}
	if len(e.attrs) == 0 {
		// Adopt the view's list instead of copying it; marked shared so that a later write to e
		// copies it rather than writing through the view's memory.
		e.attrs, e.shared = view.staged, true
		return
	}
	e.unshare(len(view.staged))
	for _, a := range view.staged {
		e.attrs = putAttr(e.attrs, a.key, a.value)
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
