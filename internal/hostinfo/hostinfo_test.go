package hostinfo

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestModeOfFSType(t *testing.T) {
	for _, tc := range []struct {
		fstype int64
		want   CgroupMode
	}{
		{unix.CGROUP2_SUPER_MAGIC, CgroupV2},
		{unix.TMPFS_MAGIC, CgroupV1}, // this machine: a tmpfs of v1 hierarchies
		{unix.CGROUP_SUPER_MAGIC, CgroupV1},
	} {
		if got := ModeOfFSType(tc.fstype); got != tc.want {
			t.Errorf("ModeOfFSType(%#x) = %v, want %v", tc.fstype, got, tc.want)
		}
	}
}

func TestCgroupsReadsTheMount(t *testing.T) {
	// Whatever this host mounts, the answer must match statfs of the same path.
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no /sys/fs/cgroup: %v", err)
	}
	got, err := Cgroups()
	if err != nil {
		t.Fatal(err)
	}
	if want := ModeOfFSType(int64(st.Type)); got != want {
		t.Fatalf("Cgroups() = %v, statfs says %v", got, want)
	}
	if _, err := cgroupsAt("/nonexistent-eppkit"); err == nil {
		t.Error("statfs of a missing path: want an error")
	}
}

func TestParseBoundingSet(t *testing.T) {
	for _, tc := range []struct {
		status  string
		want    uint64
		wantErr bool
	}{
		{"Name:\tbash\nCapPrm:\t0\nCapBnd:\t000001fffeffffff\nCapAmb:\t0\n", 0x000001fffeffffff, false},
		{"CapBnd:\t000001ffffffffff", 0x000001ffffffffff, false},
		{"Name:\tbash\n", 0, true},
		{"CapBnd:\tzz\n", 0, true},
	} {
		got, err := ParseBoundingSet(tc.status)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBoundingSet(%q) = %#x, %v; want %#x, error %v", tc.status, got, err, tc.want, tc.wantErr)
		}
	}
	// This machine's mask lacks CAP_SYS_RESOURCE and nothing below it.
	const m = 0x000001fffeffffff
	if m&(1<<CapSysResource) != 0 || m&(1<<(CapSysResource-1)) == 0 {
		t.Fatal("CapSysResource is not bit 24")
	}
}
