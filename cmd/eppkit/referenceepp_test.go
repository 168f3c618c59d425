package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestReferenceEPPStartupErrors: bad flags and bad configs fail at start-up with an error naming
// the flag and the field, before anything is served.
func TestReferenceEPPStartupErrors(t *testing.T) {
	ports := []string{"--grpc-port", freePort(t), "--grpc-health-port", freePort(t), "--metrics-port", "0"}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--endpoints", "127.0.0.1:18000", "--config-text", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n  parameters: {}\nsaturationDetector:\n  queueDepthTreshold: 3\n"},
			[]string{"--config-text", "saturationDetector", "queueDepthTreshold"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--config-text", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-cache-scorer\n  parameters:\n    blockSze: 4\n"},
			[]string{"--config-text", "plugins[0]", "blockSze"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--config-file", "/nonexistent/epp.yaml"}, []string{"--config-file"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--config-file", "a", "--config-text", "b"}, []string{"--config-file", "--config-text"}},
		{[]string{}, []string{"--endpoints", "--pool-name"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--log-level", "loud"}, []string{"--log-level"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--cert-path", "/tmp"}, []string{"--cert-path"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--objectives", "batch=low"}, []string{"--objectives"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--model-rewrites", writeRewrites(t, "rules:\n- targets: [{modelRewrite: a, weight: 0}, {modelRewrite: b, weight: 3}]\n")},
			[]string{"--model-rewrites", "document 0: spec.rules[0].targets[1].weight"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--model-rewrites", "/nonexistent/rewrites.yaml"}, []string{"--model-rewrites"}},
		{[]string{"--pool-name", "p", "--kubeconfig", "/nonexistent", "--model-rewrites", "x.yaml"}, []string{"--model-rewrites: only with --endpoints"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--predictor-url", "localhost:8000"}, []string{"--predictor-url"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--stale-threshold", "10ms", "--refresh-metrics-interval", "50ms"},
			[]string{"--stale-threshold must be ≥ --refresh-metrics-interval"}},
		{[]string{"--endpoints", "127.0.0.1:18000", "--max-buffered-body-bytes", "0"}, []string{"--max-buffered-body-bytes", "> 0"}},
	}
	for _, tc := range cases {
		cmd := newReferenceEPPCommand()
		var stderr bytes.Buffer
		cmd.SetErr(&stderr)
		cmd.SetOut(&stderr)
		cmd.SetArgs(append(append([]string{}, ports...), tc.args...))
		err := cmd.Execute()
		if err == nil {
			t.Fatalf("args %v: started, want an error naming %v", tc.args, tc.want)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("args %v: error %q does not name %q", tc.args, err, w)
			}
		}
	}
}

// TestReferenceEPPServes runs the command until its context is cancelled: health answers
// SERVING for every probed name on --grpc-health-port and /metrics serves the EPP's metrics.
func TestReferenceEPPServes(t *testing.T) {
	grpcPort, healthPort, metricsPort := freePort(t), freePort(t), freePort(t)
	cmd := newReferenceEPPCommand()
	var logs bytes.Buffer
	cmd.SetErr(&logs)
	cmd.SetArgs([]string{"--endpoints", "127.0.0.1:18000,127.0.0.1:18001", "--objectives", "batch=-1",
		"--grpc-port", grpcPort, "--grpc-health-port", healthPort, "--metrics-port", metricsPort, "--bind-address", "127.0.0.1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	conn, err := grpc.NewClient("127.0.0.1:"+healthPort, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(20 * time.Second)
	for _, svc := range []string{"", "inference-extension", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		for {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: svc})
			ccancel()
			if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("health %q: %v %v; logs:\n%s", svc, resp.GetStatus(), err, logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + metricsPort + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "eppkit_epp_pool_ready_endpoints 2") {
		t.Fatalf("metrics lack eppkit_epp_pool_ready_endpoints 2:\n%s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("command returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command did not stop after its context was cancelled")
	}
}

// writeRewrites writes content to a new file in a test directory and returns its path.
func writeRewrites(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rewrites.yaml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
