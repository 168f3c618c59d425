package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPredictorParityBadFlagsExit3(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--requests", "0"}, "--requests"},
		{[]string{"--config-file", filepath.Join(dir, "none.yaml")}, "--config-file"},
		{[]string{"--bogus"}, "unknown flag"},
	} {
		code, out := runCLI(t, append([]string{"interop", "predictor-parity"}, tc.args...)...)
		if code != exitBadFlags || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit %d naming %s", tc.args, code, out, exitBadFlags, tc.want)
		}
	}
}
