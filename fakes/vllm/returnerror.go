package vllm

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// HeaderReturnError is llm-d-inference-sim's deterministic error trigger (v0.10.2,
// pkg/communication/http.go XReturnErrorHeader, sim PR #411): a request that carries it is
// answered with the error it names instead of being run. Values (ParseReturnError):
//
//   - an HTTP status N in [400, 599], as the simulator: status N, the simulator's body
//     {"error":{"message":"Simulated error triggered by X-Return-Error header (code N)",
//     "type":<type of N>,"param":null,"code":N}}, before any response byte — for a stream too:
//     the simulator checks the header before the request runs, so a streamed request gets the
//     status and the JSON body, no SSE. It is checked after the body is parsed (a malformed
//     body is still its own 400) and before the model is resolved, as the simulator does.
//   - eppkit: "N@K" with N as above and K ≥ 0, the point of failure of a stream: the response
//     starts (200, SSE), K output tokens are streamed, then the API's in-stream error event
//     carries N (OpenAI APIs: vLLM's `data: {"error":{...}}` followed by `data: [DONE]`, as
//     vLLM's serving_chat.py ends a stream whose generator raised; /v1/messages: Anthropic's
//     `event: error`; /v1/responses: an `error` event). A request that does not stream
//     answers N before any byte (there is no later point to fail at). K at or past the last
//     token fails after the last token (whose chunk carries the finish_reason with vLLM's
//     placement, Config.StreamFinish; with OpenAI's the finishing chunk is not sent).
//   - eppkit: a failure kind of --failure-types (AllFailureTypes: the simulator's six,
//     rate_limit ... model_not_found, with their predefined errors, and eppkit's abort, reset,
//     slow-first-byte), injected as the rate-based injection would inject it.
//
// Any other value is refused with 400 naming the header (param "X-Return-Error") and the
// accepted forms; the simulator refuses a non-integer with 400 too (with param null) but sends
// any integer as the status, which an HTTP server cannot always write (1xx–3xx are not errors,
// and Go's net/http refuses codes outside 100–999), so the fake refuses those.
const HeaderReturnError = "X-Return-Error"

// ReturnError is a parsed X-Return-Error value: either an HTTP status to fail with (Status,
// with AfterTokens ≥ 0 for the eppkit stream form "N@K", else -1) or a failure kind (Kind).
type ReturnError struct {
	// Status is the HTTP status in [400, 599]; 0 when Kind is set.
	Status int
	// AfterTokens is K of "N@K": output tokens streamed before the in-stream error; -1 for the
	// plain form (fail before any byte).
	AfterTokens int
	// Kind is a failure kind of AllFailureTypes; "" when Status is set.
	Kind string
}

// ParseReturnError parses an X-Return-Error value (see HeaderReturnError). The error is the 400
// to answer: it names the header and the value.
func ParseReturnError(v string) (ReturnError, *APIError) {
	s := strings.TrimSpace(v)
	if slices.Contains(AllFailureTypes, s) {
		return ReturnError{Kind: s, AfterTokens: -1}, nil
	}
	code, after, hasAfter := strings.Cut(s, "@")
	n, err := strconv.Atoi(code)
	if err != nil {
		return ReturnError{}, badReturnError(v, "must be an integer")
	}
	if n < 400 || n > 599 {
		return ReturnError{}, badReturnError(v, "the status must be an error status in [400, 599]")
	}
	k := -1
	if hasAfter {
		if k, err = strconv.Atoi(after); err != nil || k < 0 {
			return ReturnError{}, badReturnError(v, "the point of failure after '@' must be a token count >= 0")
		}
	}
	return ReturnError{Status: n, AfterTokens: k}, nil
}

func badReturnError(v, why string) *APIError {
	return NewAPIError(http.StatusBadRequest, HeaderReturnError,
		"Invalid %s header value %q: %s (accepted: an HTTP status 400-599 such as 503, eppkit's 'status@tokens' such as 500@3 to fail a stream after that many tokens, or a failure kind: %s)",
		HeaderReturnError, v, why, strings.Join(AllFailureTypes, ", "))
}

// simReturnError is the simulator's body for an X-Return-Error status.
func simReturnError(status int) *APIError {
	return NewAPIError(status, "", "Simulated error triggered by X-Return-Error header (code %d)", status)
}

// midStream reports whether r fails a streamed response after some tokens.
func (r ReturnError) midStream() bool { return r.Status != 0 && r.AfterTokens >= 0 }
