package framework

import (
	"errors"
	"fmt"
)

// Typed errors of the request flow. Wrap them with fmt.Errorf("...: %w", ErrX); the director maps
// them to HTTP statuses with one table (SPEC §5.3).
var (
	// ErrBadRequest: the request is malformed (400). A PrepareData plugin returning it ends the
	// request; any other PrepareData error fails open.
	ErrBadRequest = errors.New("bad request")
	// ErrShed: the request was refused to protect the pool (429): shed when saturated, refused by
	// an admitter, or every endpoint was filtered out.
	ErrShed = errors.New("request shed")
	// ErrNoEndpoints: there is no candidate endpoint, or the subset hint is empty (503).
	ErrNoEndpoints = errors.New("no candidate endpoints")
	// ErrInternal: anything else inside the EPP (500).
	ErrInternal = errors.New("internal error")
)

// Refinements of the typed errors: each wraps one of the above (errors.Is finds both), so the
// status stays the parent's while logs and metrics can tell the causes apart.
var (
	// ErrFilteredOut: the filters of a profile removed every endpoint (429, wraps ErrShed).
	ErrFilteredOut = fmt.Errorf("every endpoint was filtered out: %w", ErrShed)
	// ErrEmptySubset: the gateway's subset hint is present but empty (503, wraps ErrNoEndpoints).
	ErrEmptySubset = fmt.Errorf("the subset hint is present but empty: %w", ErrNoEndpoints)
)

// Values of x-llm-d-request-dropped-reason, the header llm-d-router v0.10.0 sets on the refusals
// of flow control (pkg/common/error/error.go RequestDroppedReason; docs/request-surface.md §2).
// Only refusals wrapped in a *Dropped carry one.
const (
	// DroppedSaturated: flow control refused the request at once, its queue at capacity (429).
	DroppedSaturated = "rejected-saturated"
	// DroppedNoEndpoints: flow control refused the request and the pool has no endpoint (503).
	DroppedNoEndpoints = "rejected-no-endpoints"
	// DroppedTTLExpired: the request waited in its queue past its TTL (429).
	DroppedTTLExpired = "rejected-ttl-expired"
	// DroppedContextCancelled: the client went away while the request was queued (503).
	DroppedContextCancelled = "rejected-context-cancelled"
	// DroppedShuttingDown: the flow controller is stopping (503).
	DroppedShuttingDown = "rejected-shutting-down"
)

// Dropped is a refusal that names its x-llm-d-request-dropped-reason. Err is the typed error
// (ErrShed, ErrNoEndpoints, ...) that decides the status, as for any other refusal.
type Dropped struct {
	// Reason is one of the Dropped* values.
	Reason string
	// Err is the refusal's error.
	Err error
}

func (d *Dropped) Error() string { return d.Err.Error() + " (" + d.Reason + ")" }

// Unwrap returns Err, so errors.Is sees the typed error.
func (d *Dropped) Unwrap() error { return d.Err }

// DroppedReason returns the x-llm-d-request-dropped-reason of err: the Reason of the first
// *Dropped in its chain, "" when there is none.
func DroppedReason(err error) string {
	var d *Dropped
	if errors.As(err, &d) {
		return d.Reason
	}
	return ""
}
