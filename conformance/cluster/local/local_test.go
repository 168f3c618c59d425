package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewValidates(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "eppkit")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts Options
		want string // substring of the error; "" = no error
	}{
		{"ok", Options{Eppkit: bin, StateDir: t.TempDir()}, ""},
		{"no eppkit", Options{}, "Eppkit"},
		{"missing eppkit", Options{Eppkit: bin + "-missing"}, "make build"},
		{"bad name", Options{Eppkit: bin, Name: "a/b"}, "Name"},
		{"relative image path", Options{Eppkit: bin, Images: map[string]string{"epp": "bin/epp"}}, "absolute"},
	}
	for _, c := range cases {
		_, err := New(c.opts)
		if c.want == "" && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestLoadImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "eppkit")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Eppkit: bin, StateDir: t.TempDir(), Images: map[string]string{"registry.k8s.io/gie/epp": "/opt/epp"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"eppkit:dev", "ghcr.io/eppkit/eppkit:v1", "registry.k8s.io/gie/epp:v1.5.0"} {
		if err := p.LoadImage(context.Background(), img); err != nil {
			t.Errorf("LoadImage(%s): %v", img, err)
		}
	}
	if err := p.LoadImage(context.Background(), "envoyproxy/envoy:distroless-v1.33.2"); err == nil || !strings.Contains(err.Error(), "envoy") {
		t.Errorf("LoadImage(envoy): %v, want an error naming the image", err)
	}
}

// TestProcessRecords starts a detached process, finds it by binary and argument, and stops it.
func TestProcessRecords(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	marker := "3600" // sleep's argument; combined with the exact binary path below
	logPath := filepath.Join(t.TempDir(), "sleep.log")
	pr, exited, _, err := startDetached(sleep, []string{marker}, os.Environ(), logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProc(pr, time.Second) })
	if !pr.alive() {
		t.Fatal("started process is not alive")
	}
	found := false
	for _, f := range findProcs(sleep, marker) {
		found = found || f == pr
	}
	if !found {
		t.Errorf("findProcs(%s, %s) did not find pid %d", sleep, marker, pr.PID)
	}
	stopProc(pr, 5*time.Second)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("process did not exit after stopProc")
	}
	if pr.alive() {
		t.Error("stopped process still alive")
	}
	if (proc{PID: pr.PID, Start: "1"}).alive() {
		t.Error("a record with another start time must not be taken for the process")
	}
}
