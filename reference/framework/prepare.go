package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"sync"
	"time"

	"github.com/eppkit/eppkit/selfcheck/mutant"
)

// PrepareDataStats counts PrepareData outcomes since the runtime was built, for metrics and
// tests (SPEC §5.4: PrepareData timeouts and errors).
type PrepareDataStats struct {
	// Phases is how many requests ran the PrepareData phase (with at least one plugin).
	Phases int64
	// Errors counts plugin errors that failed open (not ErrBadRequest), panics included, by
	// plugin.
	Errors map[TypedName]int64
	// BadRequests counts plugin errors wrapping ErrBadRequest, which ended their request.
	BadRequests map[TypedName]int64
	// Timeouts counts plugins still running when the phase budget ran out, by plugin.
	Timeouts map[TypedName]int64
	// Skipped counts plugins that never started because the budget ran out in an earlier layer.
	Skipped map[TypedName]int64
}

type prepareDataStats struct {
	mu sync.Mutex
	s  PrepareDataStats
}

func (p *prepareDataStats) add(m *map[TypedName]int64, tn TypedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *m == nil {
		*m = map[TypedName]int64{}
	}
	(*m)[tn]++
}

// PrepareDataStats returns a copy of the PrepareData counters.
func (r *Runtime) PrepareDataStats() PrepareDataStats {
	r.prepStats.mu.Lock()
	defer r.prepStats.mu.Unlock()
	s := r.prepStats.s
	s.Errors = maps.Clone(s.Errors)
	s.BadRequests = maps.Clone(s.BadRequests)
	s.Timeouts = maps.Clone(s.Timeouts)
	s.Skipped = maps.Clone(s.Skipped)
	return s
}

// PrepareDataBudget returns the PrepareData phase budget (config prepareData.timeoutMs).
func (r *Runtime) PrepareDataBudget() time.Duration { return r.prepBudget }

type prepOutcome struct {
	idx int
	err error
}

// PrepareData runs the PrepareData phase of one request (SPEC §1.1): the PrepareData plugins
// layer by layer in DAG order, the plugins of one layer concurrently. Each plugin gets its own
// staged views of the endpoints (Endpoint.NewStagedView); when it returns without error its writes
// are committed to the endpoints (in name order within a layer, so a key two same-layer plugins
// write ends with the later name's value).
//
// The whole phase has one budget (config prepareData.timeoutMs, default 400 ms), timed with the
// runtime's clock. When it runs out, the phase context is cancelled, the plugins still running
// are counted as timed out and their staging is discarded (whatever they write later never
// reaches the endpoints), later layers are skipped, and PrepareData returns nil: scheduling
// proceeds with what was committed. Likewise when ctx is cancelled.
//
// A plugin error (or panic) is logged and counted and its writes are discarded; the request
// continues (fail open). An error wrapping ErrBadRequest ends the phase at once: PrepareData
// returns it wrapped as `prepareData name/type: ...`. That is the only error PrepareData returns.
func (r *Runtime) PrepareData(ctx context.Context, req *LLMRequest, endpoints []*Endpoint) error {
	if len(r.prepLayers) == 0 {
		return nil
	}
	r.prepStats.mu.Lock()
	r.prepStats.s.Phases++
	r.prepStats.mu.Unlock()

	phaseCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := r.clock.NewTimer(r.prepBudget)
	defer timer.Stop()
	start := r.clock.Now()
	requestID := ""
	if req != nil {
		requestID = req.RequestID
	}

	budget := timer.C()
	// Mutant hook (one of the two left in reference/; selfcheck/mutant, dead code without the
	// eppkit_mutants tag): prepare-budget-ignored. The budget is the runtime's own wait on its
	// plugins; a wrapper plugin can only be slower, never make the runtime wait for it.
	if mutant.Enabled && mutant.On(mutant.PrepareBudgetIgnored) {
		budget = nil // the phase waits for every plugin, however long it runs
	}
	for li, layer := range r.prepLayers {
		done := make(chan prepOutcome, len(layer))
		views := make([][]*Endpoint, len(layer))
		sets := make([]*viewSet, len(layer))
		for i, p := range layer {
			// One backing array for the plugin's views (reused across requests) and one for
			// their first staged write each (not one allocation per endpoint and per first Put).
			set := getViewSet(len(endpoints))
			sets[i] = set
			backing, vs := set.backing, set.views
			firstPut := make([]attr, len(endpoints))
			for j, e := range endpoints {
				e.stageInto(&backing[j])
				// Capped at one element: a view's first Put fills its own slot, a second one
				// reallocates, so no view writes into another's.
				backing[j].staged = firstPut[j : j : j+1]
				vs[j] = &backing[j]
			}
			views[i] = vs
			go r.runPrepareDataPlugin(phaseCtx, p, req, vs, i, done)
		}

		finished := make([]bool, len(layer))
		errs := make([]error, len(layer))
		for remaining := len(layer); remaining > 0; {
			select {
			case o := <-done:
				finished[o.idx], errs[o.idx] = true, o.err
				remaining--
				if errors.Is(o.err, ErrBadRequest) {
					tn := layer[o.idx].TypedName()
					r.prepStats.add(&r.prepStats.s.BadRequests, tn)
					r.logger.Info("prepareData: plugin refused the request", "plugin", tn.String(),
						"requestID", requestID, "error", o.err.Error())
					return fmt.Errorf("prepareData %s: %w", tn, o.err)
				}
			case <-budget:
				cancel()
				r.commit(layer, views, finished, errs, endpoints, requestID)
				for i, p := range layer {
					if !finished[i] {
						r.prepStats.add(&r.prepStats.s.Timeouts, p.TypedName())
						r.logger.Warn("prepareData: plugin overran the phase budget; its writes are discarded",
							"plugin", p.TypedName().String(), "budget", r.prepBudget, "requestID", requestID)
					}
				}
				r.skip(li+1, requestID, "the phase budget ran out")
				return nil
			case <-ctx.Done():
				r.commit(layer, views, finished, errs, endpoints, requestID)
				r.skip(li+1, requestID, "the request's context ended")
				r.logger.Info("prepareData: request context ended", "requestID", requestID,
					"error", ctx.Err().Error(), "elapsed", r.clock.Since(start))
				return nil
			}
		}
		r.commit(layer, views, finished, errs, endpoints, requestID)
		for _, set := range sets {
			putViewSet(set) // every plugin of the layer has returned
		}
	}
	return nil
}

// viewSet is one PrepareData plugin's staged views of a request's endpoints: the views and the
// array they point into. The sets of a layer whose plugins all returned are reused through
// viewSets (100 endpoints' views are ~9 KB per plugin per request, the largest allocation of a
// decision); when the phase ends early (budget, cancellation, a refused request) the layer's
// sets are left to the garbage collector, since a plugin may still be running on its views. A
// view's staged writes (firstPut) are not pooled: committing may adopt them.
type viewSet struct {
	backing []Endpoint
	views   []*Endpoint
}

var viewSets sync.Pool // of *viewSet

// getViewSet returns a set of n views, their contents to be overwritten by the caller.
func getViewSet(n int) *viewSet {
	if s, ok := viewSets.Get().(*viewSet); ok && cap(s.backing) >= n {
		s.backing, s.views = s.backing[:n], s.views[:n]
		return s
	}
	return &viewSet{backing: make([]Endpoint, n), views: make([]*Endpoint, n)}
}

// putViewSet returns s (from getViewSet) to the pool, cleared so that it keeps no endpoint,
// metrics or attribute alive. The caller must be done with its views.
func putViewSet(s *viewSet) {
	clear(s.backing)
	clear(s.views)
	viewSets.Put(s)
}

// runPrepareDataPlugin runs one plugin and reports on done, turning a panic into an error.
func (r *Runtime) runPrepareDataPlugin(ctx context.Context, p PrepareDataPlugin, req *LLMRequest, views []*Endpoint,
	idx int, done chan<- prepOutcome) {
	var err error
	defer func() {
		if v := recover(); v != nil {
			r.logger.Error("prepareData: plugin panicked", "plugin", p.TypedName().String(),
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("PrepareRequestData panicked: %v: %w", v, ErrInternal)
		}
		done <- prepOutcome{idx: idx, err: err}
	}()
	stop := r.timed(p, "PrepareData")
	err = p.PrepareRequestData(ctx, req, views)
	stop()
}

// commit copies the staging of every plugin of a layer that finished without error into the
// endpoints, in the layer's (name) order; failed plugins are logged and counted.
func (r *Runtime) commit(layer []PrepareDataPlugin, views [][]*Endpoint, finished []bool, errs []error,
	endpoints []*Endpoint, requestID string) {
	for i, p := range layer {
		if !finished[i] {
			continue
		}
		if errs[i] != nil {
			r.prepStats.add(&r.prepStats.s.Errors, p.TypedName())
			r.logger.Warn("prepareData: plugin failed; continuing without its data", "plugin", p.TypedName().String(),
				"requestID", requestID, "error", errs[i].Error())
			continue
		}
		for j, e := range endpoints {
			e.CommitStaged(views[i][j])
		}
	}
}

// skip counts and logs the plugins of the layers from `from` on, which never ran.
func (r *Runtime) skip(from int, requestID, why string) {
	for _, layer := range r.prepLayers[min(from, len(r.prepLayers)):] {
		for _, p := range layer {
			r.prepStats.add(&r.prepStats.s.Skipped, p.TypedName())
			r.logger.Warn("prepareData: plugin skipped: "+why, "plugin", p.TypedName().String(), "requestID", requestID)
		}
	}
}
