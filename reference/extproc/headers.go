package extproc

import (
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/eppkit/eppkit/reference/director"
	"github.com/eppkit/eppkit/reference/framework"
)

// reservedHeaders are request headers only the server itself sets or the gateway owns: a
// profile handler's SchedulingResult.RequestHeaders never set them (upstream v1.5.0 skips the
// same system-owned headers, pkg/epp/util/request/headers.go IsSystemOwnedHeader).
var reservedHeaders = map[string]bool{
	DestinationEndpointKey: true, DestinationEndpointServedKey: true, "content-length": true,
	director.HeaderRequestID: true, director.HeaderObjective: true, director.HeaderFairnessID: true,
	director.HeaderModelNameRewrite: true, SubsetHintKey: true,
}

// resultHeaders returns the scheduling result's RequestHeaders (for example
// disagg-profile-handler's x-prefiller-host-port) as header mutations, keys lower case and
// sorted, without the reserved headers and pseudo-headers.
func resultHeaders(res *framework.SchedulingResult) []*corev3.HeaderValueOption {
	if res == nil || len(res.RequestHeaders) == 0 {
		return nil
	}
	keys := make([]string, 0, len(res.RequestHeaders))
	for k := range res.RequestHeaders {
		if lk := strings.ToLower(k); lk != "" && !reservedHeaders[lk] && !strings.HasPrefix(lk, ":") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]*corev3.HeaderValueOption, 0, len(keys))
	for _, k := range keys {
		out = append(out, header(strings.ToLower(k), res.RequestHeaders[k]))
	}
	return out
}
