package predictorparity

import (
	"strings"
	"testing"
	"time"
)

func TestProxyLogCount(t *testing.T) {
	var b strings.Builder
	l := &proxyLog{w: &b}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l.add(proxyEntry{at: t0, method: "POST", path: "/predict/bulk/strict", status: 200})
	l.add(proxyEntry{at: t0.Add(time.Second), method: "POST", path: "/predict/bulk/strict", status: 503})
	l.add(proxyEntry{at: t0.Add(2 * time.Second), method: "POST", path: "/predict/bulk/strict", status: 200})
	l.add(proxyEntry{at: t0.Add(2 * time.Second), method: "POST", path: "/add_training_data_bulk", status: 202})
	if n, bad := l.count("/predict/bulk/strict", t0.Add(time.Second), 200); n != 2 || bad != 1 {
		t.Errorf("count since t0+1s = %d, %d bad; want 2, 1", n, bad)
	}
	if !strings.Contains(b.String(), "2026-11-30T12:00:01Z POST /predict/bulk/strict 503\n") {
		t.Errorf("log lacks the 503 line:\n%s", b.String())
	}
}
