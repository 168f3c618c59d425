package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// This machine's bounding set: every capability up to 40 but CAP_SYS_RESOURCE (24).
const noSysResource = uint64(0x000001fffeffffff)

func TestMissingCaps(t *testing.T) {
	for _, tc := range []struct {
		bnd  uint64
		last int
		want []string
	}{
		{noSysResource, 40, []string{"CAP_SYS_RESOURCE"}},
		{0x000001ffffffffff, 40, nil},
		{0x000000ffffffffff, 40, []string{"CAP_CHECKPOINT_RESTORE"}},
		{0x000000ffffffffff, 39, nil}, // an older kernel: cap 40 does not exist, privileged does not ask
		{0x0000000000000000 | ^uint64(1<<0|1<<12)&0x1ffffffffff, 40, []string{"CAP_CHOWN", "CAP_NET_ADMIN"}},
	} {
		if got := missingCaps(tc.bnd, tc.last); !cmp.Equal(got, tc.want) {
			t.Errorf("missingCaps(%#x, %d) = %v, want %v", tc.bnd, tc.last, got, tc.want)
		}
	}
}

func TestReadBoundingSet(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "status")
	if err := os.WriteFile(p, []byte("Name:\tx\nCapPrm:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readBoundingSet(p)
	if err != nil || got != noSysResource {
		t.Fatalf("readBoundingSet = %#x, %v; want %#x", got, err, noSysResource)
	}
	if err := os.WriteFile(p, []byte("Name:\tx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readBoundingSet(p); err == nil {
		t.Fatal("no CapBnd line: want an error")
	}
}

func TestFilterSpec(t *testing.T) {
	all := []any{"CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"}
	kept := []any{"CAP_CHOWN", "CAP_SYS_ADMIN"}
	caps := func(l []any) map[string]any {
		return map[string]any{"bounding": l, "effective": l, "permitted": l, "inheritable": []any{}}
	}
	for _, tc := range []struct {
		name   string
		bundle bool
		in     map[string]any
		want   map[string]any // nil = unchanged
	}{
		{"config.json", true,
			map[string]any{"ociVersion": "1.2.0", "process": map[string]any{"args": []any{"/sbin/init"}, "capabilities": caps(all)}, "hostname": "n"},
			map[string]any{"ociVersion": "1.2.0", "process": map[string]any{"args": []any{"/sbin/init"}, "capabilities": caps(kept)}, "hostname": "n"}},
		{"exec process", false,
			map[string]any{"args": []any{"sh"}, "capabilities": caps(all), "terminal": true},
			map[string]any{"args": []any{"sh"}, "capabilities": caps(kept), "terminal": true}},
		{"already allowed", true, map[string]any{"process": map[string]any{"capabilities": caps(kept)}}, nil},
		{"no capabilities", false, map[string]any{"args": []any{"sh"}}, nil},
		{"unknown names kept", false, map[string]any{"capabilities": map[string]any{"effective": []any{"CAP_FUTURE_THING"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, _ := json.Marshal(tc.in)
			out, err := filterSpec(doc, tc.bundle, noSysResource)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if out != nil {
					t.Fatalf("changed an allowed spec: %s", out)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("filtered spec (-want +got):\n%s", d)
			}
		})
	}
	if _, err := filterSpec([]byte("{"), true, noSysResource); err == nil {
		t.Error("malformed JSON: want an error")
	}
}

func TestFilterFileInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	doc := `{"process":{"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}}`
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filterFile(p, true, noSysResource); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := `{"process":{"capabilities":{"bounding":["CAP_KILL"]}}}`; string(b) != want {
		t.Fatalf("rewritten config = %s, want %s", b, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want invocation
	}{
		{[]string{"--capdrop-runc=/usr/bin/runc", "--root", "/run/docker/runtime-runc/moby", "create", "--bundle", "/b", "--pid-file", "/p", "id"},
			invocation{runc: "/usr/bin/runc", bundle: "/b", args: []string{"--root", "/run/docker/runtime-runc/moby", "create", "--bundle", "/b", "--pid-file", "/p", "id"}}},
		{[]string{"exec", "--process", "/tmp/proc.json", "--detach", "id"},
			invocation{process: "/tmp/proc.json", args: []string{"exec", "--process", "/tmp/proc.json", "--detach", "id"}}},
		{[]string{"run", "--bundle=/b2", "id"}, invocation{bundle: "/b2", args: []string{"run", "--bundle=/b2", "id"}}},
		{[]string{"--version"}, invocation{args: []string{"--version"}}},
	} {
		got := parseArgs(tc.args)
		if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(invocation{})); d != "" {
			t.Errorf("parseArgs(%q) (-want +got):\n%s", tc.args, d)
		}
	}
}
