package director

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/eppkit/eppkit/reference/framework"
)

// statusTable maps the framework's typed errors to HTTP statuses (SPEC §5.3), checked in order
// with errors.Is. It is the only place the mapping is written down.
var statusTable = []struct {
	err    error
	status int
	code   string
}{
	{framework.ErrBadRequest, http.StatusBadRequest, "BadRequest"},
	{framework.ErrShed, http.StatusTooManyRequests, "ResourceExhausted"},
	{framework.ErrNoEndpoints, http.StatusServiceUnavailable, "ServiceUnavailable"},
	{framework.ErrInternal, http.StatusInternalServerError, "Internal"},
}

// StatusFor returns the HTTP status of a request-flow error (SPEC §5.3): ErrBadRequest 400,
// ErrShed 429, ErrNoEndpoints 503, and 500 for ErrInternal and every other error. nil is 200.
func StatusFor(err error) int {
	if err == nil {
		return http.StatusOK
	}
	for _, row := range statusTable {
		if errors.Is(err, row.err) {
			return row.status
		}
	}
	return http.StatusInternalServerError
}

// CodeFor returns the error code word of a request-flow error, upstream's canonical names
// (gateway-api-inference-extension, pkg/common/error/error.go): BadRequest, ResourceExhausted,
// ServiceUnavailable, Internal. nil is "".
func CodeFor(err error) string {
	if err == nil {
		return ""
	}
	for _, row := range statusTable {
		if errors.Is(err, row.err) {
			return row.code
		}
	}
	return "Internal"
}

// ReasonFor returns the x-llm-d-request-dropped-reason of a request-flow error: the reason of a
// flow-control refusal (framework.Dropped), "" for every other refusal, as llm-d-router v0.10.0
// marks only flow-control outcomes (pkg/common/error/error.go; requestcontrol/admission.go
// translateFlowControlOutcome). nil is "".
func ReasonFor(err error) string { return framework.DroppedReason(err) }

// ErrorBody is the JSON body of a refusal, in the OpenAI error shape:
// {"error":{"message":"...","type":"BadRequest","code":400}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	// Message is the error's text.
	Message string `json:"message"`
	// Type is CodeFor(err).
	Type string `json:"type"`
	// Code is the HTTP status, StatusFor(err).
	Code int `json:"code"`
}

// ErrorJSON returns the status and the JSON body the EPP answers err with.
func ErrorJSON(err error) (int, []byte) {
	status := StatusFor(err)
	b, mErr := json.Marshal(ErrorBody{Error: ErrorDetail{Message: err.Error(), Type: CodeFor(err), Code: status}})
	if mErr != nil { // cannot happen for strings and ints
		b = []byte(`{"error":{"message":"internal error","type":"Internal","code":500}}`)
	}
	return status, b
}

// CodeCancelled is the eppkit_epp_requests_total code label of a request whose client went away
// while it was handled (see Cancelled): not a server error, and no answer can reach the client.
const CodeCancelled = "cancelled"

// Cancelled reports whether err, the outcome of handling a request on ctx, is the client going
// away: err is non-nil and either wraps context.Canceled or ctx itself was cancelled
// (context.Canceled). A deadline is not a cancellation. Typed client errors (400, 429, 503)
// decided before the cancellation keep their status.
func Cancelled(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return true
	}
	return errors.Is(ctx.Err(), context.Canceled) && StatusFor(err) == http.StatusInternalServerError
}
