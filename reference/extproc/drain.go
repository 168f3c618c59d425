package extproc

import (
	"encoding/json"
	"fmt"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
)

// Refusal of requests that reach an EPP after its drain stopped admitting new ones (SIGTERM, then
// the handover window): llm-d-router v0.10.0 answers them 503 with this header and value
// (pkg/common/error/error.go: RequestDroppedReasonHeaderKey, RequestDroppedReasonShuttingDown,
// raised for ErrFlowControllerNotRunning by pkg/epp/requestcontrol/admission.go).
const (
	// DroppedShuttingDown is DroppedReasonHeader's value for a request refused because the EPP
	// is shutting down.
	DroppedShuttingDown = "rejected-shutting-down"
)

// StopAdmitting makes the server refuse every request that starts from now on, on a new
// stream or an open one, with an ImmediateResponse 503 (DroppedReasonHeader:
// DroppedShuttingDown), while requests already scheduled run to their end. The drain of
// reference/eppserver calls it once its handover window has passed. It cannot be undone.
func (s *Server) StopAdmitting() { s.refusing.Store(true) }

// InFlight is the number of requests the server scheduled whose response has not ended yet
// (completed, failed or abandoned): what a drain waits for.
func (s *Server) InFlight() int64 { return s.inflight.Load() }

// errShuttingDown is a refusal after StopAdmitting, as the director's metrics count it (503).
var errShuttingDown = fmt.Errorf("the endpoint picker is shutting down: %w", framework.ErrNoEndpoints)

// Receiving is the number of requests whose headers arrived before StopAdmitting and whose body
// is still arriving: not scheduled yet, so not InFlight. A drain waits for them too, so such a
// body that ends after StopAdmitting is answered 503 rejected-shutting-down instead of having its
// stream cut; requests that start after StopAdmitting are not counted, so a gateway that goes on
// sending cannot hold the drain up to its timeout.
func (s *Server) Receiving() int64 { return s.receiving.Load() }

// shuttingDownResponse is the refusal of a request that arrived after StopAdmitting.
func shuttingDownResponse() *extprocv3.ProcessingResponse {
	body, _ := json.Marshal(director.ErrorBody{Error: director.ErrorDetail{
		Message: "the endpoint picker is shutting down: request rejected", Type: "ServiceUnavailable", Code: http.StatusServiceUnavailable}})
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				header("content-type", "application/json"), header(DroppedReasonHeader, DroppedShuttingDown)}},
			Body:    body,
			Details: "eppkit_epp_" + DroppedShuttingDown,
		}}}
}
