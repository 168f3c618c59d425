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
// status stays the parent's while the refusal can name its cause (SPEC §9.3 x-eppkit-reason).
var (
	// ErrFilteredOut: the filters of a profile removed every endpoint (429, wraps ErrShed).
	ErrFilteredOut = fmt.Errorf("every endpoint was filtered out: %w", ErrShed)
	// ErrEmptySubset: the gateway's subset hint is present but empty (503, wraps ErrNoEndpoints).
	ErrEmptySubset = fmt.Errorf("the subset hint is present but empty: %w", ErrNoEndpoints)
)
