// Package director runs one inference request through the reference EPP's framework Runtime
// (SPEC §1): it parses the body, builds the framework.LLMRequest, takes the candidate endpoints
// from the endpoint source (discovery) with a snapshot of each one's metrics (data layer),
// applies the subset hint, the saturation detector and shedding (SPEC §3), the stale-endpoint
// filter [eppkit], then PrepareData → Admission → Scheduling → PreRequest, and afterwards the
// response hooks and EndRequest. Errors wrap the framework's typed errors and are mapped to HTTP
// statuses by one table (StatusFor, SPEC §5.3).
//
// The director knows nothing about Envoy; reference/extproc turns ext_proc messages into calls
// of HandleRequest, Response* and EndRequest.
package director

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/eppkit/eppkit/reference/flowcontrol"
	"github.com/eppkit/eppkit/reference/framework"
)

// Request headers the director reads (SPEC §5.2, §10). The control headers (objective, model
// rewrite, fairness id, SLOs) and their aliases are framework.Header*, read with
// framework.RequestHeader; upstream: llm-d-router v0.10.0 pkg/epp/metadata/consts.go and
// pkg/common/request/constants.go.
const (
	HeaderRequestID = "x-request-id"
	// HeaderPath is the HTTP/2 pseudo-header Envoy sends with the request path.
	HeaderPath = ":path"
)

// EndpointSource is what the director needs from discovery (reference/discovery.Source
// satisfies it).
type EndpointSource interface {
	// Endpoints returns the current ready endpoints, sorted by Key().
	Endpoints() []*framework.EndpointMetadata
	// Priority returns the priority of the InferenceObjective named objective; ok is false when
	// there is no such objective.
	Priority(objective string) (priority int, ok bool)
}

// MetricsSource is what the director needs from the data layer (reference/datalayer.Collector
// satisfies it).
type MetricsSource interface {
	// Metrics returns a copy of the endpoint's latest metrics, nil when never scraped.
	Metrics(key string) *framework.Metrics
	// Stale reports whether the endpoint's last scrape failed or is older than the stale threshold.
	Stale(key string) bool
}

// snapshotSource is implemented by sources that can hand out their endpoints without copying
// (reference/discovery: Source.Snapshot); the director then reads the pool with no allocation.
type snapshotSource interface {
	Snapshot() []*framework.EndpointMetadata
}

// metricsReader is implemented by metrics sources that can return an endpoint's metrics and
// staleness in one lookup without copying (reference/datalayer.Collector.Read).
type metricsReader interface {
	Read(key string) (m *framework.Metrics, stale bool)
}

// keyedSnapshot is one snapshot of the pool with every endpoint's Key(), computed once. It is
// also the pool flow control's saturation detector reads (flowcontrol.Pool).
type keyedSnapshot struct {
	mds  []*framework.EndpointMetadata
	keys []string
	m    MetricsSource
}

// Len is the number of endpoints (flowcontrol.Pool).
func (k *keyedSnapshot) Len() int { return len(k.mds) }

// Metrics returns endpoint i's metrics, nil without a metrics source (flowcontrol.Pool).
func (k *keyedSnapshot) Metrics(i int) *framework.Metrics {
	switch r := k.m.(type) {
	case nil:
		return nil
	case metricsReader:
		m, _ := r.Read(k.keys[i])
		return m
	default:
		return r.Metrics(k.keys[i])
	}
}

// Options configure a Director. Runtime and Endpoints are required.
type Options struct {
	// Runtime is the built framework runtime.
	Runtime *framework.Runtime
	// Endpoints is the endpoint source (discovery).
	Endpoints EndpointSource
	// Metrics is the metrics source (data layer); nil means no endpoint has metrics (every
	// candidate counts as stale, so none is filtered, and the pool counts as saturated).
	Metrics MetricsSource
	// Clock times metrics freshness and scheduling; nil means the real clock.
	Clock clock.PassiveClock
	// Logger receives the director's logs; nil means slog.Default().
	Logger *slog.Logger
	// Observer records metrics of the request flow; nil records nothing.
	Observer *Observer
	// NewRequestID makes an x-request-id for requests without one; nil means a random UUID.
	NewRequestID func() string
	// ModelRewrites holds the pool's model rewrite rules (InferenceModelRewrite, SPEC §9.4); nil
	// means none.
	ModelRewrites ModelRewriter
	// Context bounds the director's background work (flow control's dispatcher: when it ends,
	// queued and later requests are refused rejected-shutting-down); nil = never ends.
	Context context.Context
}

// ModelRewriter is what the director needs from the model rewrite rules (reference/modelrewrite.Store
// satisfies it).
type ModelRewriter interface {
	// Rewrite returns the target model for a request whose body names model, chosen by weight
	// among the targets of the rule that applies, and the name of the InferenceModelRewrite the
	// rule came from; ok is false when no rule applies.
	Rewrite(model string) (target, rewrite string, ok bool)
}

// Director runs requests through a Runtime. Safe for concurrent use.
type Director struct {
	rt      *framework.Runtime
	src     EndpointSource
	metrics MetricsSource
	clock   clock.PassiveClock
	logger  *slog.Logger
	obs     *Observer
	newID   func() string
	rewrite ModelRewriter
	sat     framework.SaturationDetectorConfig
	// idPrefix and seq make the EPP-internal request ids (SPEC §9.2): idPrefix is random per
	// Director, seq counts the requests it handled.
	idPrefix string
	seq      atomic.Uint64
	// snap caches the keys of the source's last Snapshot (snapshotSource only).
	snap atomic.Pointer[keyedSnapshot]
	// fc is the flow controller (featureGates: [flowControl]), nil when off.
	fc *flowcontrol.Controller
}

// New returns a Director. It fails when Runtime or Endpoints is nil.
func New(opts Options) (*Director, error) {
	if opts.Runtime == nil {
		return nil, errors.New("director: Options.Runtime is required")
	}
	if opts.Endpoints == nil {
		return nil, errors.New("director: Options.Endpoints is required")
	}
	d := &Director{rt: opts.Runtime, src: opts.Endpoints, metrics: opts.Metrics, clock: opts.Clock,
		logger: opts.Logger, obs: opts.Observer, newID: opts.NewRequestID, rewrite: opts.ModelRewrites}
	d.idPrefix = newUUID()[:8] + "-"
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	if d.logger == nil {
		d.logger = slog.Default()
	}
	if d.newID == nil {
		d.newID = newUUID
	}
	if sd := opts.Runtime.Config().SaturationDetector; sd != nil {
		d.sat = *sd
	}
	if cfg := opts.Runtime.Config(); cfg.FlowControlEnabled() {
		det, err := flowDetector(opts.Runtime, d.sat)
		if err != nil {
			return nil, err
		}
		ctx := opts.Context
		if ctx == nil {
			ctx = context.Background()
		}
		var obs flowcontrol.Observer
		if opts.Observer != nil {
			obs = opts.Observer
		}
		d.fc, err = flowcontrol.New(ctx, flowcontrol.Options{Config: cfg.FlowControl, Detector: det, Pool: d.flowPool,
			Clock: d.clock, Observer: obs, Logger: d.logger})
		if err != nil {
			return nil, err
		}
		d.logger.Info("flow control on", "detector", det.TypedName().String(), "defaultRequestTTL", cfg.FlowControl.RequestTTL().String())
	}
	return d, nil
}

// flowDetector resolves flowControl.saturationDetector.pluginRef to a plugin of the runtime
// that is a saturation detector; without one, a utilization-detector with the top-level
// saturationDetector's thresholds. Errors name the field.
func flowDetector(rt *framework.Runtime, sat framework.SaturationDetectorConfig) (flowcontrol.SaturationDetector, error) {
	fc := rt.Config().FlowControl
	if fc == nil || fc.SaturationDetector == nil || fc.SaturationDetector.PluginRef == "" {
		return flowcontrol.NewUtilizationDetector(framework.DefaultSaturationDetector, sat.QueueDepthThreshold,
			sat.KVCacheUtilThreshold, sat.MetricsStalenessThreshold.Duration), nil
	}
	ref := fc.SaturationDetector.PluginRef
	p, ok := rt.Plugin(ref)
	if !ok {
		return nil, fmt.Errorf("flowControl.saturationDetector.pluginRef: no plugin named %q", ref)
	}
	det, ok := p.(flowcontrol.SaturationDetector)
	if !ok {
		return nil, fmt.Errorf("flowControl.saturationDetector.pluginRef: plugin %s is not a saturation detector (%s or %s)",
			p.TypedName(), flowcontrol.UtilizationDetectorType, flowcontrol.ConcurrencyDetectorType)
	}
	return det, nil
}

// flowPool is the whole pool as flow control's detector reads it.
func (d *Director) flowPool() flowcontrol.Pool {
	if _, ok := d.src.(snapshotSource); ok {
		d.pool()
		return d.snap.Load()
	}
	mds := d.src.Endpoints()
	return &keyedSnapshot{mds: mds, keys: keysOf(mds), m: d.metrics}
}

// release ends the flow-control accounting of req, once (no-op without flow control or when
// flow control did not admit it). EndRequest runs once per request, so no lock is needed.
func (d *Director) release(req *framework.LLMRequest) {
	if d.fc == nil || req == nil || !req.FlowControlled {
		return
	}
	req.FlowControlled = false
	d.fc.Release()
}

// Runtime returns the director's runtime.
func (d *Director) Runtime() *framework.Runtime { return d.rt }

// Subset is the gateway's subset hint (filter metadata envoy.lb.subset_hint /
// x-gateway-destination-endpoint-subset): the pick must be one of these endpoints, matched by IP.
type Subset struct {
	// Endpoints are "ip:port" or "ip" strings; empty means the hint is present but empty (503).
	Endpoints []string
}

// Input is one request as the gateway delivered it.
type Input struct {
	// Headers are the request headers, keys lower case (pseudo-headers such as ":path" included).
	Headers map[string]string
	// Body is the reassembled request body; nil or empty for a headers-only request.
	Body []byte
	// Subset is the subset hint; nil when the gateway sent none.
	Subset *Subset
}

// Result is a scheduled request.
type Result struct {
	// Request is the framework's view of the request. Pass it to the Response* hooks and to
	// EndRequest.
	Request *framework.LLMRequest
	// Scheduling is the scheduling result (every profile's targets, the primary profile's name).
	Scheduling *framework.SchedulingResult
	// Targets are the primary profile's target endpoints, "ip:port", in order: the pick first,
	// then the fallbacks.
	Targets []string
	// PrimaryProfile is the primary profile's name.
	PrimaryProfile string
	// RequestIDGenerated is true when the request had no x-request-id and the director made one
	// (Request.XRequestID).
	RequestIDGenerated bool
	// API is the request's API: the parsed body's, or for a headers-only request the one its path
	// names ("" without a path).
	API framework.API
	// Body is the body to forward: the original bytes, or the body re-encoded with the rewritten
	// model (BodyMutated). Nil for a headers-only request.
	Body []byte
	// BodyMutated is true when Body differs from the input body.
	BodyMutated bool
	// IncomingModel is the body's model before any rewrite ("" for a headers-only request).
	IncomingModel string
	// ModelRewrite names the InferenceModelRewrite whose rule chose Request.TargetModel, "" when
	// none did (SPEC §9.4).
	ModelRewrite string
	// Stream is the body's "stream" field.
	Stream bool
}

// Destination returns Targets joined by commas, the value of the pick header and metadata.
func (r *Result) Destination() string { return strings.Join(r.Targets, ",") }

// Refused counts, in eppkit_epp_requests_total by StatusFor(err), a request the ext_proc server
// refused before it could call HandleRequest (a body over its bounds, a request during the
// drain), so the metric counts every request the EPP answered. Nothing happens without metrics.
func (d *Director) Refused(err error) {
	if d.obs != nil {
		d.obs.observeRequest(StatusFor(err))
	}
}

// HandleRequest runs one request up to and including PreRequest (SPEC §1):
//
//  1. parses the body (400 on malformed JSON, missing model, empty messages; see ParseBody);
//     a headers-only request (empty Body) is scheduled without a body;
//  2. builds the LLMRequest: a fresh EPP-internal RequestID (the key of every per-request store,
//     SPEC §9.2), the x-request-id as a label (generated when absent), the target model (SPEC
//     §9.4: x-llm-d-model-name-rewrite (alias x-gateway-model-name-rewrite), else the model rewrite rule for the body's model picked
//     by weight, else the body's model; the body is re-encoded when it changes), the objective
//     (x-llm-d-inference-objective, alias x-gateway-inference-objective; a value that cannot
//     name an object is 400) and its priority from the endpoint source (absent = 0), the
//     fairness id (x-llm-d-inference-fairness-id);
//  3. candidates = the source's endpoints, narrowed to the subset hint by IP (present but
//     empty → 503; nothing left → 503), each with a snapshot of its metrics;
//  4. shedding: a sheddable request (priority < 0) is refused with 429 when the pool is
//     saturated (Saturated);
//  5. drops stale endpoints unless every candidate is stale [eppkit];
//  6. Runtime.Schedule (PrepareData → Admission → Scheduling), then Runtime.PreRequest.
//
// On error the request's plugin state is already released (EndRequest), and the error wraps
// one of framework.ErrBadRequest, ErrShed, ErrNoEndpoints or ErrInternal (StatusFor maps it).
// On success the caller must call EndRequest(res.Request) exactly once when the request ends,
// however it ends (normally after ResponseComplete).
func (d *Director) HandleRequest(ctx context.Context, in *Input) (res *Result, err error) {
	start := d.clock.Now()
	var req *framework.LLMRequest
	defer func() {
		if err != nil && req != nil {
			d.release(req)
			d.rt.EndRequest(req)
		}
		if d.obs != nil {
			if Cancelled(ctx, err) {
				d.obs.observeRequestCode(CodeCancelled)
			} else {
				d.obs.observeRequest(StatusFor(err))
			}
		}
	}()
	headers := in.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	res = &Result{}

	var parsed *ParsedBody
	if len(in.Body) > 0 {
		parsed, err = ParseBody(APIFromPath(headers[HeaderPath]), in.Body)
		if err != nil {
			return nil, err
		}
	}

	req = &framework.LLMRequest{
		RequestID:  d.nextRequestID(),
		XRequestID: headers[HeaderRequestID],
		Headers:    headers,
	}
	if err = readControlHeaders(req); err != nil {
		return nil, err
	}
	if req.XRequestID == "" {
		req.XRequestID = d.newID()
		res.RequestIDGenerated = true
	}
	res.API = APIFromPath(headers[HeaderPath])
	if req.Objective != "" {
		if p, ok := d.src.Priority(req.Objective); ok {
			req.Priority = p
		}
	}
	req.TargetModel, _, _ = framework.RequestHeader(headers, framework.HeaderModelNameRewrite)
	req.TargetModel = strings.TrimSpace(req.TargetModel)
	if parsed != nil {
		req.Body = parsed.Body
		res.API = parsed.API
		res.IncomingModel = parsed.Model
		res.Stream = parsed.Stream
		res.Body = in.Body
		if req.TargetModel == "" && d.rewrite != nil {
			if target, name, ok := d.rewrite.Rewrite(parsed.Model); ok {
				req.TargetModel, res.ModelRewrite = target, name
			}
		}
		if req.TargetModel == "" || parsed.API == APICountTokens {
			// count_tokens is a raw payload upstream: never rewritten (llm-d-router v0.10.0
			// director.go modelRewriteIfNeeded skips payloads it cannot re-marshal).
			req.TargetModel = parsed.Model
		}
		if req.TargetModel != parsed.Model && !isVLLMGRPC(parsed.API) {
			// A gRPC engine request names no model: there is nothing to rewrite in its body.
			b, mErr := parsed.WithModel(req.TargetModel)
			if mErr != nil {
				return nil, fmt.Errorf("rewriting the body's model: %v: %w", mErr, framework.ErrInternal)
			}
			res.Body, res.BodyMutated = b, true
		}
	}
	res.Request = req

	if d.fc != nil {
		// Flow control (docs/request-surface.md §6): wait for the pool's capacity in the
		// request's priority band, or be refused with a dropped reason. It replaces the legacy
		// shedding below, as in llm-d-router v0.10.0 (requestcontrol/admission.go).
		if ferr := d.fc.Admit(ctx, flowcontrol.Request{Priority: req.Priority, FairnessID: req.FairnessID, Bytes: int64(len(in.Body))}); ferr != nil {
			return nil, fmt.Errorf("flow control (objective %q, priority %d): %w", req.Objective, req.Priority, ferr)
		}
		req.FlowControlled = true
	}

	mds, keys := d.pool()
	if in.Subset != nil {
		if len(in.Subset.Endpoints) == 0 {
			return nil, framework.ErrEmptySubset
		}
		mds, keys = filterBySubset(mds, keys, in.Subset.Endpoints)
		if len(mds) == 0 {
			return nil, fmt.Errorf("no ready endpoint matches the subset hint %v: %w", in.Subset.Endpoints, framework.ErrNoEndpoints)
		}
	}
	if len(mds) == 0 {
		return nil, fmt.Errorf("the pool has no ready endpoint: %w", framework.ErrNoEndpoints)
	}
	ms := make([]*framework.Metrics, len(mds))
	stale := make([]bool, len(mds))
	reader, _ := d.metrics.(metricsReader)
	for i, key := range keys {
		switch {
		case reader != nil:
			ms[i], stale[i] = reader.Read(key)
		case d.metrics != nil:
			ms[i] = d.metrics.Metrics(key)
			stale[i] = d.metrics.Stale(key)
		default:
			stale[i] = true
		}
	}
	candidates := framework.NewEndpoints(mds, keys, ms)

	if d.fc == nil && req.Priority < 0 && d.Saturated(candidates) {
		return nil, fmt.Errorf("sheddable request (objective %q, priority %d) refused: the pool is saturated: %w",
			req.Objective, req.Priority, framework.ErrShed)
	}
	candidates = d.dropStale(candidates, stale)

	sres, err := d.rt.Schedule(ctx, req, candidates)
	if d.obs != nil {
		d.obs.observeScheduling(d.clock.Since(start))
	}
	if err != nil {
		if !isTyped(err) {
			err = fmt.Errorf("%w: %w", err, framework.ErrInternal)
		}
		return nil, err
	}
	primary := sres.Primary()
	for _, ep := range primary.TargetEndpoints {
		res.Targets = append(res.Targets, ep.Key())
	}
	res.Scheduling = sres
	res.PrimaryProfile = sres.PrimaryProfileName
	if d.obs != nil {
		d.obs.observePrefix(primary.TargetEndpoints[0])
	}
	d.rt.PreRequest(ctx, req, sres)
	d.logger.Debug("request scheduled", "requestID", req.RequestID, "xRequestID", req.XRequestID, "model", req.TargetModel,
		"modelRewrite", res.ModelRewrite, "targets", res.Targets, "profile", res.PrimaryProfile, "priority", req.Priority)
	return res, nil
}

// Saturated reports whether the pool is saturated (SPEC §3, upstream's legacy saturation
// detector, config saturationDetector): true when no candidate has fresh metrics (scraped
// without error and at most metricsStalenessThreshold ago) with a waiting queue ≤
// queueDepthThreshold and KV-cache use ≤ kvCacheUtilThreshold. An empty candidate list is
// saturated.
func (d *Director) Saturated(candidates []*framework.Endpoint) bool {
	now := d.clock.Now()
	for _, ep := range candidates {
		m := ep.Metrics
		if m == nil || m.UpdateTime.IsZero() || m.ScrapeError != nil {
			continue
		}
		if now.Sub(m.UpdateTime) > d.sat.MetricsStalenessThreshold.Duration {
			continue
		}
		if m.WaitingQueueSize <= d.sat.QueueDepthThreshold && m.KVCacheUsage <= d.sat.KVCacheUtilThreshold {
			return false
		}
	}
	return true
}

// dropStale removes the candidates the metrics source called stale (stale[i] for candidates[i],
// read with their metrics), unless all are [eppkit].
func (d *Director) dropStale(candidates []*framework.Endpoint, stale []bool) []*framework.Endpoint {
	if d.metrics == nil {
		return candidates
	}
	n := 0
	for _, s := range stale {
		if !s {
			n++
		}
	}
	if n == 0 || n == len(candidates) {
		return candidates
	}
	fresh := make([]*framework.Endpoint, 0, n)
	for i, ep := range candidates {
		if !stale[i] {
			fresh = append(fresh, ep)
		}
	}
	return fresh
}

// pool returns the source's endpoints sorted by key and their keys. With a snapshotSource the
// keys are computed once per snapshot, not per request.
func (d *Director) pool() ([]*framework.EndpointMetadata, []string) {
	ss, ok := d.src.(snapshotSource)
	if !ok {
		mds := d.src.Endpoints()
		return mds, keysOf(mds)
	}
	mds := ss.Snapshot()
	// A snapshot is immutable and a new one is a new slice; the cache holds the old one, so its
	// address cannot be reused while cached: same first element and length = same snapshot.
	if c := d.snap.Load(); c != nil && len(c.mds) == len(mds) && (len(mds) == 0 || &c.mds[0] == &mds[0]) {
		return c.mds, c.keys
	}
	c := &keyedSnapshot{mds: mds, keys: keysOf(mds), m: d.metrics}
	d.snap.Store(c)
	return c.mds, c.keys
}

func keysOf(mds []*framework.EndpointMetadata) []string {
	keys := make([]string, len(mds))
	for i, md := range mds {
		keys[i] = md.Key()
	}
	return keys
}

// filterBySubset keeps the endpoints whose IP is in subset ("ip:port" or "ip"; ports are
// ignored, as upstream v1.5.0 does in pkg/epp/requestcontrol/candidates.go).
func filterBySubset(mds []*framework.EndpointMetadata, keys []string, subset []string) ([]*framework.EndpointMetadata, []string) {
	ips := make(map[string]bool, len(subset))
	for _, s := range subset {
		s = strings.TrimSpace(s)
		if host, _, err := net.SplitHostPort(s); err == nil {
			s = host
		}
		s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
		if ip := net.ParseIP(s); ip != nil {
			s = ip.String()
		}
		ips[s] = true
	}
	var out []*framework.EndpointMetadata
	var outKeys []string
	for i, md := range mds {
		addr := md.Address
		if ip := net.ParseIP(addr); ip != nil {
			addr = ip.String()
		}
		if ips[addr] {
			out = append(out, md)
			outKeys = append(outKeys, keys[i])
		}
	}
	return out, outKeys
}

func isTyped(err error) bool {
	return errors.Is(err, framework.ErrBadRequest) || errors.Is(err, framework.ErrShed) ||
		errors.Is(err, framework.ErrNoEndpoints) || errors.Is(err, framework.ErrInternal)
}

// Lookup returns the metadata of the endpoint with key ("ip:port") among the source's
// endpoints, or metadata built from the key when the source does not have it; nil when key is
// not "ip:port".
func (d *Director) Lookup(key string) *framework.EndpointMetadata {
	mds, keys := d.pool()
	for i, md := range mds {
		if keys[i] == key {
			return md
		}
	}
	host, port, err := net.SplitHostPort(key)
	if err != nil {
		return nil
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil
	}
	return &framework.EndpointMetadata{Address: host, Port: p}
}

// ResponseHeader runs the ResponseHeader plugins.
func (d *Director) ResponseHeader(ctx context.Context, req *framework.LLMRequest, resp *framework.Response) {
	d.rt.ResponseHeader(ctx, req, resp)
}

// ResponseBody runs the ResponseBody plugins with one streamed chunk.
func (d *Director) ResponseBody(ctx context.Context, req *framework.LLMRequest, resp *framework.Response, chunk []byte) {
	d.rt.ResponseBody(ctx, req, resp, chunk)
}

// ResponseComplete runs the ResponseComplete plugins (resp.EndOfStream false when the request
// was abandoned).
func (d *Director) ResponseComplete(ctx context.Context, req *framework.LLMRequest, resp *framework.Response) {
	d.rt.ResponseComplete(ctx, req, resp)
}

// EndRequest releases the request's plugin state and its flow-control accounting. Call it once per
// successful HandleRequest.
func (d *Director) EndRequest(req *framework.LLMRequest) {
	d.release(req)
	d.rt.EndRequest(req)
}

// Now returns the director's clock time.
func (d *Director) Now() time.Time { return d.clock.Now() }

// nextRequestID returns a new EPP-internal request id: the Director's random prefix and a
// sequence number, unique for the Director's life.
func (d *Director) nextRequestID() string {
	var buf [24]byte
	b := append(buf[:0], d.idPrefix...)
	return string(strconv.AppendUint(b, d.seq.Add(1), 36))
}

// newUUID returns a random (version 4) UUID in its canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
