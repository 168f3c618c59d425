package fleet

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/vllm"
)

func baseConfig() vllm.Config {
	c := vllm.DefaultConfig()
	c.Model = "m"
	c.Seed = 1
	return c
}

func TestStartValidation(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"zero count", Options{Count: 0, Base: baseConfig()}, "Count"},
		{"too many", Options{Count: 251, Base: baseConfig()}, "Count"},
		{"no model", Options{Count: 1, Base: vllm.DefaultConfig()}, "model"},
		{"garbage prefix", Options{Count: 1, Base: baseConfig(), IPPrefix: "garbage"}, "IPPrefix"},
		{"no trailing dot", Options{Count: 1, Base: baseConfig(), IPPrefix: "127.0.10"}, "IPPrefix"},
		{"two octets", Options{Count: 1, Base: baseConfig(), IPPrefix: "127.0."}, "IPPrefix"},
		{"not loopback", Options{Count: 1, Base: baseConfig(), IPPrefix: "10.0.0."}, "IPPrefix"},
		{"octet out of range", Options{Count: 1, Base: baseConfig(), IPPrefix: "127.0.300."}, "IPPrefix"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Start(tc.opts)
			if err == nil {
				f.Close()
				t.Fatalf("Start succeeded, want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestLayouts(t *testing.T) {
	for _, distinct := range []bool{false, true} {
		f, err := Start(Options{Count: 3, Base: baseConfig(), DistinctPorts: distinct,
			PerServer: func(i int, c *vllm.Config) { c.MaxNumSeqs = 10 + i }})
		if err != nil {
			t.Fatalf("distinct=%v: %v", distinct, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := f.WaitHealthy(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		wantLoopback := !distinct && LoopbackAliasesWork(DefaultIPPrefix)
		if f.Loopback() != wantLoopback {
			t.Errorf("distinct=%v: Loopback() = %v, want %v", distinct, f.Loopback(), wantLoopback)
		}
		addrs := map[string]bool{}
		for i, m := range f.Members() {
			addrs[m.Addr()] = true
			if got := m.Config().MaxNumSeqs; got != 10+i {
				t.Errorf("member %d MaxNumSeqs = %d, want %d (PerServer)", i, got, 10+i)
			}
			resp, err := http.Get(m.URL() + "/health")
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("member %d health: %v", i, err)
			}
			resp.Body.Close()
			if resp.Header.Get(vllm.HeaderPod) != m.Name {
				t.Errorf("member %d x-inference-pod = %q, want %q", i, resp.Header.Get(vllm.HeaderPod), m.Name)
			}
		}
		if len(addrs) != 3 {
			t.Errorf("distinct=%v: addresses %v are not distinct", distinct, addrs)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		if err := f.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		cancel()
		if f.Member(0).Running() {
			t.Error("member 0 still running after Shutdown")
		}
	}
}

// TestFallbackWarns: where loopback aliases do not bind, the fleet falls back to distinct ports
// and says so (the requested common port is ignored).
func TestFallbackWarns(t *testing.T) {
	orig := loopbackAliasesWork
	loopbackAliasesWork = func(string) bool { return false }
	t.Cleanup(func() { loopbackAliasesWork = orig })
	var logs bytes.Buffer
	f, err := Start(Options{Count: 2, Base: baseConfig(), Port: 18123, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Loopback() {
		t.Fatal("Loopback() = true with aliases that do not bind")
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "distinct ports") || !strings.Contains(out, "port=18123") {
		t.Fatalf("logs %q, want a warning about the distinct-port fallback naming port 18123", out)
	}
}
