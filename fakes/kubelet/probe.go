package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeTiming is a probe's timing with Kubernetes' defaults (core/v1 Probe): period 10 s,
// timeout 1 s, success threshold 1, failure threshold 3, no initial delay.
type probeTiming struct {
	initialDelay, period, timeout time.Duration
	success, failure              int
}

func timingOf(p *corev1.Probe) probeTiming {
	t := probeTiming{period: 10 * time.Second, timeout: time.Second, success: 1, failure: 3}
	if p.InitialDelaySeconds > 0 {
		t.initialDelay = time.Duration(p.InitialDelaySeconds) * time.Second
	}
	if p.PeriodSeconds > 0 {
		t.period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		t.timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	if p.SuccessThreshold > 0 {
		t.success = int(p.SuccessThreshold)
	}
	if p.FailureThreshold > 0 {
		t.failure = int(p.FailureThreshold)
	}
	return t
}

// probeKind says what a probeEvent reports.
type probeKind int

const (
	// probeReadiness: the readiness verdict changed (probeEvent.ready).
	probeReadiness probeKind = iota
	// probeStarted: the startup probe succeeded; readiness and liveness probing begin.
	probeStarted
	// probeStartupFailed: the startup probe failed failureThreshold times in a row.
	probeStartupFailed
	// probeLivenessFailed: the liveness probe failed failureThreshold times in a row.
	probeLivenessFailed
)

// runProbes runs a container's probes the way the kubelet's prober manager does (kubernetes
// pkg/kubelet/prober/worker.go): the startup probe first, alone, until it succeeds (probeStarted)
// or fails failureThreshold times in a row (probeStartupFailed, and nothing more); then the
// readiness and liveness probes side by side, until ctx ends or the liveness probe fails
// failureThreshold times in a row (probeLivenessFailed). The container is killed on the failures
// by the receiver, which cancels ctx.
func runProbes(ctx context.Context, c *corev1.Container, podIP string, send func(probeEvent)) {
	if c.StartupProbe != nil {
		ok, msg := probeUntil(ctx, c.StartupProbe, podIP, c.Ports, true)
		if ctx.Err() != nil {
			return
		}
		if !ok {
			send(probeEvent{kind: probeStartupFailed, msg: "startup probe failed: " + msg})
			return
		}
		send(probeEvent{kind: probeStarted, msg: "startup probe succeeded"})
	}
	var wg sync.WaitGroup
	if c.ReadinessProbe != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runReadiness(ctx, c.ReadinessProbe, podIP, c.Ports, func(ready bool, msg string) {
				send(probeEvent{kind: probeReadiness, ready: ready, msg: msg})
			})
		}()
	}
	if c.LivenessProbe != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, msg := probeUntil(ctx, c.LivenessProbe, podIP, c.Ports, false); ctx.Err() == nil {
				send(probeEvent{kind: probeLivenessFailed, msg: "liveness probe failed: " + msg})
			}
		}()
	}
	wg.Wait()
}

// probeUntil probes (after the initial delay, every period) until failureThreshold consecutive
// failures (false and the last failure), or, with untilSuccess, successThreshold consecutive
// successes (true); or until ctx ends (false, "").
func probeUntil(ctx context.Context, p *corev1.Probe, podIP string, ports []corev1.ContainerPort, untilSuccess bool) (bool, string) {
	t := timingOf(p)
	select {
	case <-ctx.Done():
		return false, ""
	case <-time.After(t.initialDelay):
	}
	okRun, failRun := 0, 0
	tick := time.NewTicker(t.period)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := probeOnce(pctx, p, podIP, ports)
		cancel()
		if ctx.Err() != nil {
			return false, ""
		}
		if err == nil {
			okRun, failRun = okRun+1, 0
			if untilSuccess && okRun >= t.success {
				return true, ""
			}
		} else {
			okRun, failRun = 0, failRun+1
			if failRun >= t.failure {
				return false, err.Error()
			}
		}
		select {
		case <-ctx.Done():
			return false, ""
		case <-tick.C:
		}
	}
}

// runReadiness probes until ctx ends and calls report on every change of the readiness
// verdict (starting from not ready): ready after `success` consecutive successes, not ready after
// `failure` consecutive failures. msg is the last probe's outcome.
func runReadiness(ctx context.Context, p *corev1.Probe, podIP string, ports []corev1.ContainerPort, report func(ready bool, msg string)) {
	t := timingOf(p)
	select {
	case <-ctx.Done():
		return
	case <-time.After(t.initialDelay):
	}
	ready, okRun, failRun := false, 0, 0
	tick := time.NewTicker(t.period)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := probeOnce(pctx, p, podIP, ports)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			okRun, failRun = okRun+1, 0
			if !ready && okRun >= t.success {
				ready = true
				report(true, "readiness probe succeeded")
			}
		} else {
			okRun, failRun = 0, failRun+1
			if ready && failRun >= t.failure {
				ready = false
				report(false, "readiness probe failed: "+err.Error())
			} else if !ready && failRun == 1 {
				report(false, "readiness probe failed: "+err.Error())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// errUnsupportedProbe is returned for exec probes (no containers to exec into).
var errUnsupportedProbe = errors.New("exec probes are not supported by the process kubelet (use httpGet, grpc or tcpSocket)")

// probeOnce runs one probe against the pod IP (or the probe's host) within ctx.
func probeOnce(ctx context.Context, p *corev1.Probe, podIP string, ports []corev1.ContainerPort) error {
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		port, err := resolvePort(h.Port, ports)
		if err != nil {
			return err
		}
		host := podIP
		if h.Host != "" {
			host = h.Host
		}
		scheme := "http"
		if h.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		path := h.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+path, nil)
		if err != nil {
			return err
		}
		for _, hd := range h.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		req.Header.Set("User-Agent", "kube-probe/1.37 ("+Component+")")
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true} //nolint:gosec // probes skip verification like the kubelet's
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
		resp.Body.Close()
		// The kubelet counts 200–399 as success (pkg/probe/http).
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, ports)
		if err != nil {
			return err
		}
		host := podIP
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return c.Close()
	case p.GRPC != nil:
		conn, err := grpc.NewClient(net.JoinHostPort(podIP, strconv.Itoa(int(p.GRPC.Port))),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return fmt.Errorf("gRPC health check of service %q: %w", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health check of service %q: status %s", svc, resp.GetStatus())
		}
		return nil
	case p.Exec != nil:
		return errUnsupportedProbe
	}
	return errors.New("probe has no handler (httpGet, grpc or tcpSocket)")
}

// resolvePort turns a probe port (number or container port name) into a number.
func resolvePort(p intstr.IntOrString, ports []corev1.ContainerPort) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("probe port %d is out of range", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("probe port %q names no container port", p.StrVal)
}
