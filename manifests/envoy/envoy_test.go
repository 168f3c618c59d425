package envoy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/eppkit/eppkit/manifests"
)

// TestBootstrapValidates parses and validates the committed bootstrap and checks that the walker
// really unpacked every typed config in it (so a pass is not a walk that saw nothing).
func TestBootstrapValidates(t *testing.T) {
	bs, err := Parse(manifests.EnvoyBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	unpacked, err := validate(bs)
	if err != nil {
		t.Fatalf("manifests/envoy/envoy.yaml: %v", err)
	}
	counts := map[string]int{}
	for _, p := range unpacked {
		counts[p[strings.LastIndex(p, "<")+1:len(p)-1]]++
	}
	want := map[string]int{
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager": 2,
		"envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor":                       2,
		"envoy.extensions.filters.http.router.v3.Router":                                    2,
		"envoy.extensions.access_loggers.stream.v3.StdoutAccessLog":                         2,
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions":                            1,
	}
	if diff := cmp.Diff(want, counts); diff != "" {
		t.Errorf("unpacked Any types (-want +got):\n%s\npaths:\n%s", diff, strings.Join(unpacked, "\n"))
	}
}

func unpack[T any, PT interface {
	*T
	proto.Message
}](t *testing.T, a *anypb.Any) PT {
	t.Helper()
	m := PT(new(T))
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
	}
	return m
}

// TestBootstrapShape checks what the e2e suite relies on beyond schema validity: the listener
// ports and failure modes, full-duplex streamed bodies, the route to the ORIGINAL_DST cluster
// keyed on x-gateway-destination-endpoint, the FailOpen fallback over the pool, and the EPP
// cluster matching the Service in manifests/k8s.
func TestBootstrapShape(t *testing.T) {
	bs, err := Validate(manifests.EnvoyBootstrap())
	if err != nil {
		t.Fatal(err)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	type listenerWant struct {
		port         uint32
		failOpen     bool
		routeTargets []string
	}
	wantListeners := map[string]listenerWant{
		"failopen":  {manifests.EnvoyFailOpenPort, true, []string{"original_destination_cluster", "pool_failopen"}},
		"failclose": {manifests.EnvoyFailClosePort, false, []string{"original_destination_cluster"}},
	}
	seen := map[string]bool{}
	for _, l := range bs.GetStaticResources().GetListeners() {
		w, ok := wantListeners[l.GetName()]
		if !ok {
			t.Errorf("unexpected listener %q", l.GetName())
			continue
		}
		seen[l.GetName()] = true
		if got := l.GetAddress().GetSocketAddress().GetPortValue(); got != w.port {
			t.Errorf("listener %s port %d, want %d", l.GetName(), got, w.port)
		}
		hcm := unpack[hcmv3.HttpConnectionManager](t, onlyFilter(t, l).GetTypedConfig())
		filters := hcm.GetHttpFilters()
		if len(filters) != 2 || filters[0].GetName() != "envoy.filters.http.ext_proc" || filters[1].GetName() != "envoy.filters.http.router" {
			t.Fatalf("listener %s http filters %v, want ext_proc then router", l.GetName(), filters)
		}
		ep := unpack[extprocv3.ExternalProcessor](t, filters[0].GetTypedConfig())
		pm := ep.GetProcessingMode()
		if pm.GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED || pm.GetResponseBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			t.Errorf("listener %s body modes %v/%v, want FULL_DUPLEX_STREAMED both ways", l.GetName(), pm.GetRequestBodyMode(), pm.GetResponseBodyMode())
		}
		if pm.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || pm.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND ||
			pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
			t.Errorf("listener %s header/trailer modes %v, want SEND", l.GetName(), pm)
		}
		if d := ep.GetMessageTimeout().AsDuration(); d <= 0 {
			t.Errorf("listener %s message_timeout %v, want > 0", l.GetName(), d)
		}
		if ep.GetFailureModeAllow() != w.failOpen {
			t.Errorf("listener %s failure_mode_allow %v, want %v", l.GetName(), ep.GetFailureModeAllow(), w.failOpen)
		}
		if ep.GetRouteCacheAction() != extprocv3.ExternalProcessor_CLEAR {
			t.Errorf("listener %s route_cache_action %v, want CLEAR (the pick header must re-select the route)", l.GetName(), ep.GetRouteCacheAction())
		}
		if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != "epp" {
			t.Errorf("listener %s ext_proc cluster %q, want epp", l.GetName(), got)
		}
		var targets []string
		routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
		for _, r := range routes {
			targets = append(targets, r.GetRoute().GetCluster())
		}
		if diff := cmp.Diff(w.routeTargets, targets); diff != "" {
			t.Errorf("listener %s route clusters (-want +got):\n%s", l.GetName(), diff)
		}
		if w.failOpen {
			h := routes[0].GetMatch().GetHeaders()
			if len(h) != 1 || h[0].GetName() != "x-gateway-destination-endpoint" || !h[0].GetPresentMatch() {
				t.Errorf("listener failopen: first route must match on x-gateway-destination-endpoint being present, got %v", h)
			}
		}
		// The e2e suite tells a routed request from a failed-open one by this header.
		for _, r := range routes {
			want := "picked"
			if r.GetRoute().GetCluster() == "pool_failopen" {
				want = "failopen"
			}
			hs := r.GetResponseHeadersToAdd()
			if len(hs) != 1 || hs[0].GetHeader().GetKey() != manifests.EnvoyRouteHeader || hs[0].GetHeader().GetValue() != want {
				t.Errorf("listener %s route %s: response_headers_to_add %v, want %s: %s", l.GetName(), r.GetName(), hs, manifests.EnvoyRouteHeader, want)
			}
		}
		for _, c := range targets {
			if clusters[c] == nil {
				t.Errorf("listener %s routes to undefined cluster %q", l.GetName(), c)
			}
		}
	}
	if len(seen) != len(wantListeners) {
		t.Errorf("listeners %v, want %v", seen, wantListeners)
	}

	od := clusters["original_destination_cluster"]
	if od.GetType() != clusterv3.Cluster_ORIGINAL_DST || od.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED ||
		!od.GetOriginalDstLbConfig().GetUseHttpHeader() || od.GetOriginalDstLbConfig().GetHttpHeaderName() != "x-gateway-destination-endpoint" {
		t.Errorf("original_destination_cluster: %v", od)
	}
	addr := func(c *clusterv3.Cluster) string {
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
	}
	if c := clusters["pool_failopen"]; c.GetType() != clusterv3.Cluster_STRICT_DNS || addr(c) != fmt.Sprintf("%s:%d", manifests.FakeVLLMService, manifests.FakeVLLMPort) {
		t.Errorf("pool_failopen must resolve the headless Service %s:%d, got %v", manifests.FakeVLLMService, manifests.FakeVLLMPort, c)
	}
	if c := clusters["epp"]; addr(c) != fmt.Sprintf("%s:%d", manifests.EPPService, manifests.EPPGRPCPort) {
		t.Errorf("epp cluster must reach the Service %s:%d, got %s", manifests.EPPService, manifests.EPPGRPCPort, addr(c))
	}
	// The e2e suite's "Service selects no pod" spec relies on connections to the EPP being
	// recycled (an established flow through the ClusterIP outlives the endpoints).
	po := unpack[upstreamhttpv3.HttpProtocolOptions](t, clusters["epp"].GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"])
	if d := po.GetCommonHttpProtocolOptions().GetMaxConnectionDuration(); d == nil || d.AsDuration() <= 0 || d.AsDuration() > 15*time.Second {
		t.Errorf("epp cluster max_connection_duration %v, want set and at most 15s", d)
	}
	if got := bs.GetAdmin().GetAddress().GetSocketAddress().GetPortValue(); got != manifests.EnvoyAdminPort {
		t.Errorf("admin port %d, want %d", got, manifests.EnvoyAdminPort)
	}
}

func onlyFilter(t *testing.T, l *listenerv3.Listener) *listenerv3.Filter {
	t.Helper()
	fcs := l.GetFilterChains()
	if len(fcs) != 1 || len(fcs[0].GetFilters()) != 1 {
		t.Fatalf("listener %s: want one filter chain with one filter", l.GetName())
	}
	return fcs[0].GetFilters()[0]
}

// TestValidateRejects breaks the committed bootstrap one way at a time; each must be refused
// with an error that points at the broken part.
func TestValidateRejects(t *testing.T) {
	good := string(manifests.EnvoyBootstrap())
	tests := []struct {
		name     string
		old, new string
		wantErr  []string
	}{
		{
			name: "processing_mode with an undefined body mode (ValidateAll inside two Anys)",
			old:  "request_body_mode: FULL_DUPLEX_STREAMED", new: "request_body_mode: 9",
			wantErr: []string{"ExternalProcessor", "RequestBodyMode", "value must be one of the defined enum values",
				"static_resources.listeners[0].filter_chains[0].filters[0].typed_config <envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager>.http_filters[0].typed_config"},
		},
		{
			name: "processing_mode with an unknown mode name",
			old:  "response_body_mode: FULL_DUPLEX_STREAMED", new: "response_body_mode: FULL_DUPLEX",
			wantErr: []string{"FULL_DUPLEX"},
		},
		{
			name: "ext_proc message_timeout above its bound",
			old:  "message_timeout: 10s", new: "message_timeout: 7200s",
			wantErr: []string{"ExternalProcessor", "MessageTimeout"},
		},
		{
			name: "typed config of an unregistered type",
			old:  "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", new: "type.googleapis.com/envoy.extensions.filters.http.nosuch.v3.NoSuch",
			wantErr: []string{"envoy.extensions.filters.http.nosuch.v3.NoSuch"},
		},
		{
			name: "cluster connect_timeout of zero (ValidateAll on the bootstrap itself)",
			old:  "connect_timeout: 5s", new: "connect_timeout: 0s",
			wantErr: []string{"ConnectTimeout"},
		},
		{
			name: "unknown field",
			old:  "failure_mode_allow: true", new: "failure_mode_allowed: true",
			wantErr: []string{"failure_mode_allowed"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(good, tt.old) {
				t.Fatalf("bootstrap has no %q to break", tt.old)
			}
			_, err := Validate([]byte(strings.Replace(good, tt.old, tt.new, 1)))
			if err == nil {
				t.Fatalf("Validate accepted the bootstrap with %q", tt.new)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
