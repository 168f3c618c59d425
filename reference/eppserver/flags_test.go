package eppserver

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/eppkit/eppkit/reference/extproc"
)

// TestMaxBufferedBodyBytesFlag: --max-buffered-body-bytes takes a decimal byte count (a leading
// zero is not octal) or a Kubernetes quantity, defaults to extproc.DefaultMaxBufferedBodyBytes,
// and refuses fractions, values over 18 digits, hexadecimal and garbage naming the flag and why.
func TestMaxBufferedBodyBytesFlag(t *testing.T) {
	parse := func(args ...string) (int64, error) {
		var f Flags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.AddFlags(fs)
		err := fs.Parse(args)
		return f.MaxBufferedBodyBytes, err
	}
	if n, err := parse(); err != nil || n != extproc.DefaultMaxBufferedBodyBytes {
		t.Fatalf("default: %d, %v; want %d", n, err, extproc.DefaultMaxBufferedBodyBytes)
	}
	for in, want := range map[string]int64{"010": 10, "536870912": 536870912, "512Mi": 512 << 20, "1Gi": 1 << 30, "500M": 500_000_000, "1e6": 1_000_000} {
		if n, err := parse("--max-buffered-body-bytes=" + in); err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", in, n, err, want)
		}
	}
	for in, why := range map[string]string{
		"0x400": "want a byte count", "abc": "want a byte count", "": "want a byte count", "1K": "want a byte count",
		"1.5": "a fraction of a byte", "100m": "a fraction of a byte", "1.5Ki": "a fraction of a byte",
		"99999999999999999999": "at most 999999999999999999 bytes", "1Ei": "at most 999999999999999999 bytes",
		"9223372036854775807": "at most 999999999999999999 bytes",
	} {
		_, err := parse("--max-buffered-body-bytes=" + in)
		if err == nil || !strings.Contains(err.Error(), "--max-buffered-body-bytes") || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: err %v, want an error naming --max-buffered-body-bytes that says %q", in, err, why)
		}
	}
	if n, err := parse("--max-buffered-body-bytes=999999999999999999"); err != nil || n != 999999999999999999 {
		t.Errorf("the largest value: %d, %v", n, err)
	}
}
