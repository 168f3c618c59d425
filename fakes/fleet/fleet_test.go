package fleet

import (
	"context"
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
