package extproc

import (
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
)

// reservedHeaders are request headers only the server itself sets or the gateway owns, every
// control header under its current and its legacy name included: a profile handler's
// SchedulingResult.RequestHeaders never set them (llm-d-router v0.10.0 skips the same
// system-owned headers, pkg/epp/util/request/headers.go IsSystemOwnedHeader).
var reservedHeaders = func() map[string]bool {
	m := map[string]bool{
		DestinationEndpointKey: true, DestinationEndpointServedKey: true, "content-length": true,
		director.HeaderRequestID: true, SubsetHintKey: true, DroppedReasonHeader: true,
	}
	for _, h := range framework.ControlHeaders() {
		m[h] = true
	}
	return m
}()

// resultHeaders returns the scheduling result's RequestHeaders (for example
// disagg-profile-handler's x-prefiller-host-port) as header mutations, keys lower case and
// sorted, without the reserved headers and pseudo-headers.
func resultHeaders(res *framework.SchedulingResult) []*corev3.HeaderValueOption {
	if res == nil || len(res.RequestHeaders) == 0 {
		return nil
	}
	lower := make(map[string]string, len(res.RequestHeaders)) // lower-case key → original key
	for k := range res.RequestHeaders {
		if lk := strings.ToLower(k); lk != "" && !reservedHeaders[lk] && !strings.HasPrefix(lk, ":") {
			lower[lk] = k
		}
	}
	keys := make([]string, 0, len(lower))
	for lk := range lower {
		keys = append(keys, lk)
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, lk := range keys {
		out = append(out, header(lk, res.RequestHeaders[lower[lk]]))
	}
	return out
}
