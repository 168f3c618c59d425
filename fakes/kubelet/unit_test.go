package kubelet

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_IP": "127.1.0.7", "NS": "e2e"}
	cases := []struct{ in, want string }{
		{"--host", "--host"},
		{"$(POD_IP)", "127.1.0.7"},
		{"--bind=$(POD_IP):9002", "--bind=127.1.0.7:9002"},
		{"$(NS)-$(POD_IP)", "e2e-127.1.0.7"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(POD_IP)", "$(POD_IP)"},
		{"cost $5", "cost $5"},
		{"$(POD_IP", "$(POD_IP"},
		{"end$", "end$"},
	}
	for _, c := range cases {
		if got := expand(c.in, vars); got != c.want {
			t.Errorf("expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRewritePaths(t *testing.T) {
	mounts := []mountRewrite{{"/config/sub", "/state/b"}, {"/config", "/state/a"}}
	cases := []struct{ in, want string }{
		{"/config/config.yaml", "/state/a/config.yaml"},
		{"--config-file=/config/config.yaml", "--config-file=/state/a/config.yaml"},
		{"/config", "/state/a"},
		{"/config/sub/x", "/state/b/x"},
		{"/configuration/x", "/configuration/x"},
		{"--a=/config/x,/config/y", "--a=/state/a/x,/state/a/y"},
		{"nothing", "nothing"},
	}
	for _, c := range cases {
		if got := rewritePaths(c.in, mounts); got != c.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestMatchImage(t *testing.T) {
	images := map[string]string{"eppkit": "/bin/eppkit", "registry.k8s.io/gie/epp:v1.5.0": "/cache/epp", "other/thing": "/bin/thing"}
	cases := []struct {
		ref, want string
		ok        bool
	}{
		{"eppkit:dev", "/bin/eppkit", true},
		{"ghcr.io/eppkit/eppkit:v0.1.0", "/bin/eppkit", true},
		{"localhost:5000/eppkit@sha256:abcd", "/bin/eppkit", true},
		{"registry.k8s.io/gie/epp:v1.5.0", "/cache/epp", true},
		{"registry.k8s.io/gie/epp:v1.6.0", "", false},
		{"other/thing:1", "/bin/thing", true},
		{"thing:1", "", false},
		{"envoyproxy/envoy:distroless-v1.33.2", "", false},
	}
	for _, c := range cases {
		got, ok := MatchImage(images, c.ref)
		if got != c.want || ok != c.ok {
			t.Errorf("MatchImage(%q) = %q, %v; want %q, %v", c.ref, got, ok, c.want, c.ok)
		}
	}
}

func TestParseImageMap(t *testing.T) {
	got, err := ParseImageMap([]string{"eppkit=/bin/eppkit", " epp:v1 = /cache/epp "})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"eppkit": "/bin/eppkit", "epp:v1": "/cache/epp"}, got); d != "" {
		t.Errorf("ParseImageMap (-want +got):\n%s", d)
	}
	for _, bad := range [][]string{{"eppkit"}, {"=/x"}, {"a="}, {"a=/x", "a=/y"}} {
		if _, err := ParseImageMap(bad); err == nil {
			t.Errorf("ParseImageMap(%q): want an error", bad)
		}
	}
}

func TestNewValidates(t *testing.T) {
	k, err := New(Config{Kubeconfig: "/k", StateDir: "/s"})
	if err == nil || k != nil {
		t.Fatalf("New without Client: want an error, got %v", err)
	}
}

func TestAllocateIP(t *testing.T) {
	k := &Kubelet{prefix: netip.MustParsePrefix("127.1.0.0/30"), ips: map[netip.Addr]types.UID{}}
	k.nextIP = k.prefix.Addr().Next()
	a, err := k.allocateIP("a", "")
	if err != nil || a.String() != "127.1.0.1" {
		t.Fatalf("first IP = %v, %v; want 127.1.0.1", a, err)
	}
	b, err := k.allocateIP("b", "")
	if err != nil || b.String() != "127.1.0.2" {
		t.Fatalf("second IP = %v, %v; want 127.1.0.2", b, err)
	}
	if _, err := k.allocateIP("c", ""); err == nil {
		t.Fatal("a /30 has two usable addresses: want an error for the third")
	}
	k.releaseIP(a, "a")
	// The preferred (earlier) IP is honoured when free.
	if c, err := k.allocateIP("c", "127.1.0.1"); err != nil || c != a {
		t.Fatalf("preferred IP = %v, %v; want %v", c, err, a)
	}
	// A preferred IP held by another pod is not given out twice.
	k.releaseIP(b, "b")
	if d, err := k.allocateIP("d", "127.1.0.1"); err != nil || d.String() != "127.1.0.2" {
		t.Fatalf("taken preferred IP = %v, %v; want 127.1.0.2", d, err)
	}
}
