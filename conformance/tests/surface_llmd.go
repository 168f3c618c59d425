package tests

// Names of llm-d-router v0.10.0's request surface (SPEC §10) the tests use beside the control
// headers (openai_input_headers_not_echoed.go).
const (
	// droppedReasonHeader names why a request was refused (llm-d-router v0.10.0
	// pkg/common/error/error.go RequestDroppedReasonHeaderKey).
	droppedReasonHeader = "x-llm-d-request-dropped-reason"
)
