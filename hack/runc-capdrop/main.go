// Command runc-capdrop is an OCI runtime wrapper for hosts whose capability bounding set lacks
// capabilities that `docker run --privileged` asks for (for example a VM without
// CAP_SYS_RESOURCE). Docker grants a privileged container every capability up to the kernel's
// /proc/sys/kernel/cap_last_cap (moby oci/caps), and runc fails to apply a capability outside the
// bounding set with "unable to apply caps: operation not permitted" — for `docker run` and for
// `docker exec`, which kind runs for every node step.
//
// hack/container-engine.sh installs it as dockerd's default runtime only when the bounding set
// lacks such a capability. On each call it removes every capability that is not in its own
// bounding set from the container's process spec — <bundle>/config.json for create and run,
// the --process file for exec — and then execs the real runc with the same arguments, less its
// own --capdrop-runc=PATH option (set in daemon.json's runtimeArgs). Nothing else is changed.
//
//	runc-capdrop --check          prints the capabilities it would drop ("none" when none)
//	runc-capdrop --sleep          sleeps until killed (the engine smoke test's container process)
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// defaultRunc is the real runtime when no --capdrop-runc option is given (Debian's runc package).
const defaultRunc = "/usr/sbin/runc"

func main() {
	bnd, err := readBoundingSet("/proc/self/status")
	if err != nil {
		fail(err)
	}
	if len(os.Args) == 2 && os.Args[1] == "--sleep" {
		for {
			time.Sleep(time.Hour)
		}
	}
	if len(os.Args) == 2 && os.Args[1] == "--check" {
		last, err := readLastCap("/proc/sys/kernel/cap_last_cap")
		if err != nil {
			fail(err)
		}
		missing := missingCaps(bnd, last)
		if len(missing) == 0 {
			fmt.Println("none")
			return
		}
		fmt.Println(strings.Join(missing, " "))
		return
	}
	inv := parseArgs(os.Args[1:])
	if inv.runc == "" {
		inv.runc = defaultRunc
	}
	if inv.bundle != "" {
		if err := filterFile(inv.bundle+"/config.json", true, bnd); err != nil && !os.IsNotExist(err) {
			fail(err)
		}
	}
	if inv.process != "" {
		if err := filterFile(inv.process, false, bnd); err != nil && !os.IsNotExist(err) {
			fail(err)
		}
	}
	argv := append([]string{inv.runc}, inv.args...)
	if err := syscall.Exec(inv.runc, argv, os.Environ()); err != nil {
		fail(fmt.Errorf("exec %s: %w", inv.runc, err))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "runc-capdrop:", err)
	os.Exit(1)
}
