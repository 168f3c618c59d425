package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// capNames are the Linux capabilities by number (include/uapi/linux/capability.h), as OCI specs
// spell them.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// readBoundingSet parses the CapBnd line of a /proc/<pid>/status file (a 64-bit hex mask).
func readBoundingSet(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: CapBnd %q: %w", path, strings.TrimSpace(v), err)
			}
			return m, nil
		}
	}
	return 0, fmt.Errorf("%s: no CapBnd line", path)
}

// readLastCap reads /proc/sys/kernel/cap_last_cap.
func readLastCap(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// missingCaps names the capabilities 0..last (what a privileged container is granted) that the
// bounding set bnd lacks.
func missingCaps(bnd uint64, last int) []string {
	var out []string
	for i := 0; i <= last && i < 64; i++ {
		if bnd&(1<<uint(i)) == 0 {
			out = append(out, capName(i))
		}
	}
	return out
}

func capName(i int) string {
	if i < len(capNames) {
		return capNames[i]
	}
	return "CAP_" + strconv.Itoa(i)
}

// allowed reports whether the capability named name is in the bounding set. Names it does not
// know are kept: the wrapper removes only what it knows to be missing.
func allowed(name string, bnd uint64) bool {
	for i, n := range capNames {
		if n == name {
			return bnd&(1<<uint(i)) != 0
		}
	}
	return true
}

// filterCaps removes the capabilities outside bnd from an OCI "capabilities" object
// ({"bounding": [...], "effective": [...], ...}) and reports whether anything changed.
func filterCaps(caps map[string]any, bnd uint64) bool {
	changed := false
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if s, ok := c.(string); ok && !allowed(s, bnd) {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	return changed
}

// filterSpec filters the process capabilities of an OCI document: a runtime spec (config.json,
// capabilities at .process.capabilities) when bundle, else a process spec (runc exec --process,
// at .capabilities). It returns the new document, or nil when nothing changed.
func filterSpec(doc []byte, bundle bool, bnd uint64) ([]byte, error) {
	var top map[string]any
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, err
	}
	proc := top
	if bundle {
		p, ok := top["process"].(map[string]any)
		if !ok {
			return nil, nil
		}
		proc = p
	}
	caps, ok := proc["capabilities"].(map[string]any)
	if !ok || !filterCaps(caps, bnd) {
		return nil, nil
	}
	return json.Marshal(top)
}

// filterFile rewrites path in place (through a temporary file and a rename) when its
// capabilities change.
func filterFile(path string, bundle bool, bnd uint64) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := filterSpec(doc, bundle, bnd)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if out == nil {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".capdrop"
	if err := os.WriteFile(tmp, out, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// invocation is what the wrapper reads from runc's command line.
type invocation struct {
	// runc is the real runtime (--capdrop-runc), "" when not given.
	runc string
	// bundle and process are the --bundle/-b directory and the --process/-p file, "" when absent.
	bundle, process string
	// args are the arguments for the real runc (without --capdrop-runc).
	args []string
}

// parseArgs finds the options the wrapper acts on in runc's arguments; every argument except
// --capdrop-runc=PATH is passed on unchanged and in order.
func parseArgs(args []string) invocation {
	var inv invocation
	for i := 0; i < len(args); i++ {
		a := args[i]
		if v, ok := strings.CutPrefix(a, "--capdrop-runc="); ok {
			inv.runc = v
			continue
		}
		inv.args = append(inv.args, a)
		next := func() string {
			if i+1 < len(args) {
				return args[i+1]
			}
			return ""
		}
		switch {
		case a == "--bundle" || a == "-b":
			inv.bundle = next()
		case strings.HasPrefix(a, "--bundle="):
			inv.bundle = strings.TrimPrefix(a, "--bundle=")
		case a == "--process" || a == "-p":
			inv.process = next()
		case strings.HasPrefix(a, "--process="):
			inv.process = strings.TrimPrefix(a, "--process=")
		}
	}
	return inv
}
