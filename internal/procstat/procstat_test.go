package procstat

import (
	"os"
	"strings"
	"testing"
)

func TestProcstat(t *testing.T) {
	if v, err := CPUSeconds(os.Getpid()); err != nil || v < 0 {
		t.Fatalf("CPUSeconds(self) = %v, %v", v, err)
	}
	if _, err := CPUSeconds(1 << 30); err == nil {
		t.Fatal("CPUSeconds of a missing pid returned no error")
	}
	one, five, fifteen, err := LoadAverage()
	if err != nil || one < 0 || five < 0 || fifteen < 0 {
		t.Fatalf("LoadAverage = %v %v %v, %v", one, five, fifteen, err)
	}
	// This test process has touched at least its heap and stack: more than 1 MiB and less than
	// the machine.
	if b, err := PeakRSS(); err != nil || b < 1<<20 || b > 1<<40 {
		t.Fatalf("PeakRSS = %d, %v", b, err)
	}
	if s := PeakRSSString(); !strings.HasSuffix(s, " MiB") {
		t.Fatalf("PeakRSSString = %q", s)
	}
	if f := strings.Fields(LoadAverageString()); len(f) != 3 {
		t.Fatalf("LoadAverageString = %q, want three fields", LoadAverageString())
	}
}
