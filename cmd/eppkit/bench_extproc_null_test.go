package main

import (
	"strings"
	"testing"
)

func TestNullEPPCommandRejectsBadEndpoints(t *testing.T) {
	for _, e := range []string{"foo:bar", "127.0.0.1:99999", "127.0.0.1:0", "1.2.3.4", ""} {
		code, out := runCLI(t, "bench", "null-epp", "--endpoints", e, "--grpc-port", "0", "--metrics-port", "0")
		if code == 0 || !strings.Contains(out, "--endpoints") {
			t.Errorf("--endpoints %q: exit %d, output %q; want a failure naming --endpoints", e, code, out)
		}
	}
}
