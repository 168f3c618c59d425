// Package discovery tells the reference EPP which model-server endpoints exist: a static list
// (--endpoints) or the Ready pods of a Kubernetes InferencePool (--pool-name), with the
// InferenceObjective priorities that decide which requests are sheddable (SPEC §3).
//
// Both sources keep the current endpoint set and report every change to subscribers. The
// InferencePool source watches through controller-runtime informers; the rule that turns a pool
// and its pods into endpoints is the pure function PoolEndpoints, restating upstream
// gateway-api-inference-extension v1.5.0 pkg/epp/datastore/datastore.go
// (podUpdateOrAddIfNotExist, podResyncAll) and pkg/epp/util/pod (IsPodReady).
package discovery

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/eppkit/eppkit/reference/framework"
)

// Source is where the reference EPP learns its endpoints and objective priorities.
type Source interface {
	// Start begins watching and returns once the watches are set up (not necessarily synced);
	// watching stops when ctx ends. Errors: the source could not be set up (for the
	// InferencePool source: the API server is unreachable or does not serve InferencePool).
	Start(ctx context.Context) error
	// Synced reports whether the first full view of the endpoints has been observed; the gRPC
	// readiness check waits for it.
	Synced() bool
	// Endpoints returns the current Ready endpoints, copies sorted by Key().
	Endpoints() []*framework.EndpointMetadata
	// Snapshot returns the same endpoints as Endpoints without copying: a slice shared by every
	// caller until the set changes. Callers must not modify the slice or the metadata. Added for the
	// per-request path of the director, which reads the pool on every decision.
	Snapshot() []*framework.EndpointMetadata
	// Subscribe registers fn. fn is first called with the current endpoints as added (when there
	// are any), then after each change, serially and never concurrently with itself or with
	// another subscriber: added holds endpoints that appeared or whose metadata changed (same
	// Key), removed those whose Key left. Both hold copies sorted by Key(). fn must not call
	// Subscribe.
	Subscribe(fn func(added, removed []*framework.EndpointMetadata))
	// Priority returns the priority of the InferenceObjective with that name; ok is false when
	// there is none (callers then use priority 0, SPEC §3).
	Priority(objective string) (priority int, ok bool)
}

// endpointSet is the current endpoints plus the subscribers that hear of changes. deliver
// serialises changes and their callbacks; mu guards the map for readers.
type endpointSet struct {
	deliver sync.Mutex
	subs    []func(added, removed []*framework.EndpointMetadata)

	mu  sync.RWMutex
	eps map[string]*framework.EndpointMetadata
	// snap is a private copy of eps sorted by Key(), built on the first read after a change and
	// then shared read-only (Snapshot); nil means "rebuild".
	snap []*framework.EndpointMetadata
}

func cloneMeta(m *framework.EndpointMetadata) *framework.EndpointMetadata {
	c := *m
	c.Labels = maps.Clone(m.Labels)
	return &c
}

func sameMeta(a, b *framework.EndpointMetadata) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.PodName == b.PodName &&
		a.Address == b.Address && a.Port == b.Port && maps.Equal(a.Labels, b.Labels)
}

func sortByKey(eps []*framework.EndpointMetadata) {
	slices.SortFunc(eps, func(a, b *framework.EndpointMetadata) int { return strings.Compare(a.Key(), b.Key()) })
}

// list returns copies of the current endpoints sorted by key.
func (s *endpointSet) list() []*framework.EndpointMetadata {
	return cloneAll(s.snapshot())
}

// snapshot returns the current endpoints sorted by key, shared and read-only: the slice and the
// metadata are never modified afterwards (a change builds a new snapshot), so readers need no copy.
// Reading an unchanged set costs one read lock and no allocation.
func (s *endpointSet) snapshot() []*framework.EndpointMetadata {
	s.mu.RLock()
	snap := s.snap
	s.mu.RUnlock()
	if snap != nil {
		return snap
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil {
		out := make([]*framework.EndpointMetadata, 0, len(s.eps))
		for _, m := range s.eps {
			out = append(out, cloneMeta(m))
		}
		sortByKey(out)
		s.snap = out
	}
	return s.snap
}

func (s *endpointSet) subscribe(fn func(added, removed []*framework.EndpointMetadata)) {
	if fn == nil {
		return
	}
	s.deliver.Lock()
	defer s.deliver.Unlock()
	s.subs = append(s.subs, fn)
	if cur := s.list(); len(cur) > 0 {
		fn(cur, nil)
	}
}

// replace makes next (keyed by Key()) the current set and tells the subscribers what changed.
// It returns whether anything did.
func (s *endpointSet) replace(next map[string]*framework.EndpointMetadata) bool {
	s.deliver.Lock()
	defer s.deliver.Unlock()
	var added, removed []*framework.EndpointMetadata
	s.mu.Lock()
	for k, m := range next {
		if old, ok := s.eps[k]; !ok || !sameMeta(old, m) {
			added = append(added, m)
		}
	}
	for k, m := range s.eps {
		if _, ok := next[k]; !ok {
			removed = append(removed, m)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		s.mu.Unlock()
		return false
	}
	s.eps = next
	s.snap = nil
	s.mu.Unlock()
	sortByKey(added)
	sortByKey(removed)
	for _, fn := range s.subs {
		fn(cloneAll(added), cloneAll(removed))
	}
	return true
}

func cloneAll(eps []*framework.EndpointMetadata) []*framework.EndpointMetadata {
	if eps == nil {
		return nil
	}
	out := make([]*framework.EndpointMetadata, len(eps))
	for i, m := range eps {
		out[i] = cloneMeta(m)
	}
	return out
}
