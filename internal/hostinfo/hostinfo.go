// Package hostinfo reads the two facts about this host that decide how a kind cluster must be
// set up on it (conformance/cluster/kind, `eppkit tools build kind-node`): whether cgroup v1 is
// mounted, and whether the capability bounding set lacks a capability a privileged container
// is given. Both are read from the kernel's files, never assumed; the readers take their paths
// so tests can feed them other hosts' files.
package hostinfo

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability numbers (include/uapi/linux/capability.h) this package is asked about.
const (
	// CapSysResource is CAP_SYS_RESOURCE: without it runc cannot lower a process's
	// oom_score_adj, which kubelet asks for every pod sandbox.
	CapSysResource = 24
)

// CgroupMode is how /sys/fs/cgroup is mounted.
type CgroupMode int

const (
	// CgroupV2 is the unified hierarchy (cgroup2 on /sys/fs/cgroup).
	CgroupV2 CgroupMode = iota
	// CgroupV1 is the legacy or hybrid layout (a tmpfs of v1 controller mounts).
	CgroupV1
)

func (m CgroupMode) String() string {
	if m == CgroupV1 {
		return "cgroup v1"
	}
	return "cgroup v2"
}

// Cgroups returns the mode of /sys/fs/cgroup from its filesystem type (statfs: CGROUP2_SUPER_MAGIC
// is v2; anything else, tmpfs holding v1 hierarchies, is v1).
func Cgroups() (CgroupMode, error) {
	return cgroupsAt("/sys/fs/cgroup")
}

func cgroupsAt(path string) (CgroupMode, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return CgroupV2, fmt.Errorf("statfs %s: %w", path, err)
	}
	return ModeOfFSType(int64(st.Type)), nil
}

// ModeOfFSType maps a statfs f_type of /sys/fs/cgroup to a CgroupMode.
func ModeOfFSType(t int64) CgroupMode {
	if t == unix.CGROUP2_SUPER_MAGIC {
		return CgroupV2
	}
	return CgroupV1
}

// BoundingSet returns this process's capability bounding set (CapBnd of /proc/self/status).
func BoundingSet() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return ParseBoundingSet(string(b))
}

// ParseBoundingSet reads the CapBnd mask of a /proc/<pid>/status text.
func ParseBoundingSet(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapBnd %q: %w", strings.TrimSpace(v), err)
			}
			return m, nil
		}
	}
	return 0, fmt.Errorf("no CapBnd line")
}

// LacksCap reports whether this host's bounding set lacks capability n.
func LacksCap(n int) (bool, error) {
	bnd, err := BoundingSet()
	if err != nil {
		return false, err
	}
	return bnd&(1<<uint(n)) == 0, nil
}
