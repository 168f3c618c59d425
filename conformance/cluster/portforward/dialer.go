package portforward

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodLookup returns the name of the running pod of namespace whose IP is ip ("" when none).
type PodLookup func(ctx context.Context, namespace, ip string) (string, error)

// LookupByIP is the PodLookup through the API server: pods of namespace with status.podIP = ip
// that are not terminated.
func LookupByIP(cs kubernetes.Interface) PodLookup {
	return func(ctx context.Context, namespace, ip string) (string, error) {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + ip})
		if err != nil {
			return "", err
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil {
				return p.Name, nil
			}
		}
		return "", nil
	}
}

// PodDialer returns a dialer for "podIP:port" addresses of pods in namespace (what an EPP picks,
// what EndpointSlices list): each connection goes through a port-forward of the pool to the pod
// with that IP, so a process outside the cluster reaches pods without routing to the pod
// network. A forward that fails to connect is dropped and started once more (its pod may have
// been replaced). A loopback address (a forward's own local end) is dialled directly. An IP no
// pod of namespace has is an error naming it.
func (p *Pool) PodDialer(lookup PodLookup, namespace string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, fmt.Errorf("port-forward dial %s: port: %w", addr, err)
		}
		pod, err := lookup(ctx, namespace, host)
		if err != nil {
			return nil, fmt.Errorf("port-forward dial %s: find the pod: %w", addr, err)
		}
		if pod == "" {
			return nil, fmt.Errorf("port-forward dial %s: no running pod of namespace %s has IP %s", addr, namespace, host)
		}
		t := Target{Namespace: namespace, Pod: pod, Port: port}
		var lastErr error
		for attempt := 0; attempt < 2; attempt++ {
			local, err := p.Addr(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("port-forward dial %s (%s): %w", addr, t, err)
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, local)
			if err == nil {
				return c, nil
			}
			lastErr = err
			p.Forget(t)
		}
		return nil, fmt.Errorf("port-forward dial %s (%s): %w", addr, t, lastErr)
	}
}
