package logtail

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.log")
	if err := os.WriteFile(p, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n    int
		want []string
	}{{2, []string{"b", "c"}}, {5, []string{"a", "b", "c"}}, {0, nil}} {
		if diff := cmp.Diff(tc.want, Lines(p, tc.n)); diff != "" {
			t.Errorf("Lines(%d) (-want +got):\n%s", tc.n, diff)
		}
	}
	if got := String(p, 2); got != "b\nc" {
		t.Errorf("String = %q", got)
	}
	if got := String(filepath.Join(t.TempDir(), "missing"), 3); got != "" {
		t.Errorf("missing file: %q", got)
	}
}
